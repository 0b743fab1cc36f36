"""Client tokens (dynaq.core.access): the compact form, grants, lookup, and when none are needed."""

from __future__ import annotations

import pytest

from dynaq.config import AuthConfig, config_from_mapping
from dynaq.core.access import (
    AccessPolicy,
    access_policy,
    is_loopback_host,
    parse_token,
    parse_tokens,
    token_digest,
)
from dynaq.errors import InvalidInput

SECRET = "s3cret-0123456789abcdef"


def test_a_token_reads_name_secret_and_grants() -> None:
    t = parse_token(f"worker:{SECRET}:read+write=queue/jobs-*;read=topic/events", 0)
    assert t.name == "worker"
    assert t.allows("read", "queue", "jobs-1") and t.allows("write", "queue", "jobs-1")
    assert not t.allows("admin", "queue", "jobs-1")
    assert not t.allows("read", "queue", "other")
    assert not t.allows("read", "topic", "jobs-1")  # the kind matters
    assert t.allows("read", "topic", "events") and not t.allows("write", "topic", "events")


def test_admin_implies_read_and_write_and_no_kind_means_every_kind() -> None:
    t = parse_token(f"ops:{SECRET}:admin=*", 0)
    for perm in ("read", "write", "admin"):
        for kind in ("queue", "topic", "batch", None):
            assert t.allows(perm, kind, "anything")
    scoped = parse_token(f"ops:{SECRET}:admin=queue/*", 0)
    assert not scoped.allows("admin", None, "*")  # not "everything": only queues


def test_patterns_are_globs_on_the_whole_name() -> None:
    t = parse_token(f"t:{SECRET}:read=jobs-?", 0)
    assert t.allows("read", "queue", "jobs-1")
    assert not t.allows("read", "queue", "jobs-12")
    assert not t.allows("read", "queue", "my-jobs-1")
    batches = parse_token(f"b:{SECRET}:write=batch/exact", 0)
    assert batches.allows("write", "batch", "exact")
    assert not batches.allows("write", "batch", "estimated")


def test_a_token_may_be_configured_by_its_digest_only() -> None:
    (t,) = parse_tokens([f"ci:{token_digest(SECRET)}:read=*"])
    policy = AccessPolicy([t])
    assert policy.find(SECRET) is t
    assert policy.find(token_digest(SECRET)) is None  # the digest is not the token


def test_lookup_finds_exactly_the_presented_token() -> None:
    tokens = parse_tokens([f"a:{SECRET}:read=*", f"b:{SECRET}X:write=*"])
    policy = AccessPolicy(tokens)
    assert policy.find(SECRET) is tokens[0]
    assert policy.find(SECRET + "X") is tokens[1]
    assert policy.find(SECRET[:-1]) is None
    assert policy.find("") is None
    assert policy.find("x" * 5000) is None


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        (f"{SECRET}", "NAME:TOKEN:GRANTS"),
        (f"bad name:{SECRET}:read=*", "NAME:TOKEN:GRANTS"),
        ("n:short:read=*", "16-512 characters"),
        (f"n:{SECRET}:", "no grants"),
        (f"n:{SECRET}:read", "PERMS=RESOURCE"),
        (f"n:{SECRET}:delete=*", "unknown permission 'delete'"),
        (f"n:{SECRET}:read=queues/x", "unknown resource kind 'queues'"),
        (f"n:{SECRET}:read=queue/", "bad name pattern"),
        (f"n:{SECRET}:read=[ab]", "bad name pattern"),
        ("n:sha256:abc:read=*", "sha256:<64 hex digits>"),
    ],
)
def test_bad_tokens_are_refused_without_echoing_the_secret(spec: str, needle: str) -> None:
    with pytest.raises(InvalidInput, match=r"auth\.tokens\[0\]") as err:
        parse_token(spec, 0)
    assert needle in str(err.value)
    assert SECRET not in str(err.value)


def test_names_and_secrets_are_unique() -> None:
    with pytest.raises(InvalidInput, match="same name"):
        parse_tokens([f"a:{SECRET}:read=*", f"a:{SECRET}X:read=*"])
    with pytest.raises(InvalidInput, match="same secret"):
        parse_tokens([f"a:{SECRET}:read=*", f"b:{token_digest(SECRET)}:read=*"])


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("", False),
        ("::", False),
        ("10.1.2.3", False),
        ("dynaq-1", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_no_tokens_is_open_only_on_loopback_or_when_allowed() -> None:
    assert access_policy(AuthConfig(), "127.0.0.1") is None
    with pytest.raises(InvalidInput, match=r"auth\.allow_anonymous") as err:
        access_policy(AuthConfig(), "0.0.0.0")
    assert "DYNAQ_AUTH_TOKENS" in str(err.value)
    assert access_policy(AuthConfig(allow_anonymous=True), "0.0.0.0") is None
    policy = access_policy(AuthConfig(tokens=[f"a:{SECRET}:read=*"]), "0.0.0.0")
    assert policy is not None and policy.find(SECRET) is not None


def test_tokens_come_from_the_environment_and_stay_out_of_reprs() -> None:
    env = {
        "DYNAQ_AUTH_TOKENS": f"ops:{SECRET}:admin=*, worker:{SECRET}X:read+write=queue/jobs-*",
        "DYNAQ_AUTH_ALLOW_ANONYMOUS": "false",
        "DYNAQ_GOSSIP_KEY": "gossip-secret-value",
    }
    config = config_from_mapping({}, env)
    names = [t.name for t in parse_tokens(config.auth.tokens)]
    assert names == ["ops", "worker"]
    assert SECRET not in repr(config) and "gossip-secret-value" not in repr(config)


def test_a_presented_token_that_is_not_ascii_matches_nothing() -> None:
    """The HTTP parser hands undecodable header bytes over surrogate-escaped: such a
    value is no token (and must not raise while it is hashed)."""
    policy = AccessPolicy(parse_tokens([f"ops:{SECRET}:admin=*"]))
    assert policy.find(SECRET) is not None
    for presented in ("\udcff\udcfe", "é" + SECRET, SECRET + "\u00a0"):
        assert policy.find(presented) is None
