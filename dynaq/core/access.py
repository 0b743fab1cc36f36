"""Client access: bearer tokens, what each grants, and when a node may run without them.

One token is one string (so that a list of them is also one environment
variable, ``DYNAQ_AUTH_TOKENS``, comma-separated)::

    NAME:SECRET:GRANT[;GRANT...]
    GRANT    = PERMS=RESOURCE            e.g. read+write=queue/jobs-*
    PERMS    = read | write | admin, joined by "+"   (admin implies read and write)
    RESOURCE = [KIND/]PATTERN            KIND: queue, topic, batch, stream or processor;
                                         none = every kind
    PATTERN  = a name with * (any run) and ? (one character); batches are named by
               their mode (exact, estimated)
    SECRET   = 16+ characters of A-Z a-z 0-9 . _ ~ + / = -   (the bearer token itself)
             | sha256:<64 hex>            (only its SHA-256: the config holds no secret)

``NAME`` identifies the token in errors and logs; the secret never appears in
either. Presented tokens are compared by their SHA-256 digests with
:func:`hmac.compare_digest` against every configured token, so the time taken
says nothing about which token (or how much of one) matched.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

from dynaq.config import AuthConfig
from dynaq.errors import InvalidInput

READ, WRITE, ADMIN = "read", "write", "admin"
PERMS = (READ, WRITE, ADMIN)
KINDS = ("queue", "topic", "batch", "stream", "processor")
MAX_PRESENTED = 1024
"""Longest bearer token looked at (longer ones are refused unhashed)."""

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SECRET = re.compile(r"[A-Za-z0-9._~+/=-]{16,512}")
_HASHED = re.compile(r"sha256:([0-9a-f]{64})")
_PATTERN = re.compile(r"[A-Za-z0-9_.*?-]{1,80}")
_IMPLIED = {READ: {READ}, WRITE: {WRITE}, ADMIN: {READ, WRITE, ADMIN}}


@dataclass(frozen=True, slots=True)
class Grant:
    """Permissions on the resources one pattern matches."""

    perms: frozenset[str]
    kind: str | None
    pattern: str

    def allows(self, perm: str, kind: str | None, name: str) -> bool:
        if perm not in self.perms or (self.kind is not None and self.kind != kind):
            return False
        return fnmatch.fnmatchcase(name, self.pattern)


@dataclass(frozen=True, slots=True)
class Token:
    """One configured token: its name, the SHA-256 of its secret, its grants."""

    name: str
    digest: bytes
    grants: tuple[Grant, ...]

    def allows(self, perm: str, kind: str | None, name: str) -> bool:
        """Whether ``perm`` on the ``kind`` resource ``name`` is granted."""
        return any(g.allows(perm, kind, name) for g in self.grants)


def token_digest(secret: str) -> str:
    """The ``sha256:<hex>`` form of a secret, to configure a token without its secret."""
    return "sha256:" + hashlib.sha256(secret.encode()).hexdigest()


def _grant(text: str, where: str) -> Grant:
    perms_text, eq, resource = text.partition("=")
    if not eq:
        raise InvalidInput(f"{where}: a grant is PERMS=RESOURCE (read=queue/jobs-*), got {text!r}")
    perms: set[str] = set()
    for perm in perms_text.split("+"):
        if perm not in _IMPLIED:
            raise InvalidInput(f"{where}: unknown permission {perm!r}; use read, write or admin")
        perms |= _IMPLIED[perm]
    kind: str | None = None
    if "/" in resource:
        kind, _, resource = resource.partition("/")
        if kind not in KINDS:
            raise InvalidInput(
                f"{where}: unknown resource kind {kind!r}; use queue, topic, batch, stream, processor"
            )
    if not _PATTERN.fullmatch(resource):
        raise InvalidInput(f"{where}: bad name pattern {resource!r} (names with * and ?)")
    return Grant(frozenset(perms), kind, resource)


def parse_token(spec: str, index: int) -> Token:
    """Parse one ``NAME:SECRET:GRANTS`` entry of ``auth.tokens``.

    Errors name the entry by index and name, never by its secret.
    """
    where = f"auth.tokens[{index}]"
    name, sep1, rest = spec.strip().partition(":")
    secret, sep2, grants = rest.rpartition(":")
    if not (sep1 and sep2) or not _NAME.fullmatch(name):
        raise InvalidInput(f"{where}: expected NAME:TOKEN:GRANTS with a name of A-Z a-z 0-9 _ . -")
    where = f"{where} ({name!r})"
    hashed = _HASHED.fullmatch(secret)
    if hashed is not None:
        digest = bytes.fromhex(hashed[1])
    elif _SECRET.fullmatch(secret):
        digest = hashlib.sha256(secret.encode()).digest()
    else:
        raise InvalidInput(
            f"{where}: the token must be 16-512 characters of A-Z a-z 0-9 . _ ~ + / = - "
            "or sha256:<64 hex digits>"
        )
    parts = [g for g in grants.split(";") if g]
    if not parts:
        raise InvalidInput(f"{where}: no grants (e.g. read=queue/jobs-*)")
    return Token(name, digest, tuple(_grant(g, where) for g in parts))


def parse_tokens(specs: Sequence[str]) -> tuple[Token, ...]:
    """Parse ``auth.tokens``; names and secrets must be unique."""
    tokens = tuple(parse_token(s, i) for i, s in enumerate(specs))
    names = [t.name for t in tokens]
    if len(set(names)) != len(names):
        raise InvalidInput("auth.tokens: two tokens have the same name")
    if len({t.digest for t in tokens}) != len(tokens):
        raise InvalidInput("auth.tokens: two tokens have the same secret")
    return tokens


class AccessPolicy:
    """The configured tokens; looks up the one a request presents."""

    def __init__(self, tokens: Sequence[Token]) -> None:
        if not tokens:
            raise ValueError("an access policy needs at least one token")
        self.tokens = tuple(tokens)

    def find(self, presented: str) -> Token | None:
        """The token whose secret is ``presented``, in time independent of which one."""
        if not presented or len(presented) > MAX_PRESENTED or not presented.isascii():
            # Tokens are ASCII; a header with other bytes (surrogate-escaped by
            # the HTTP parser) cannot be one and must not reach .encode().
            return None
        digest = hashlib.sha256(presented.encode()).digest()
        found: Token | None = None
        for token in self.tokens:  # no early exit: every token is compared
            if hmac.compare_digest(digest, token.digest):
                found = token
        return found


def is_loopback_host(host: str) -> bool:
    """Whether a listener on ``host`` is reachable only from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a wildcard ("", 0.0.0.0, ::) or a name: reachable from elsewhere


def access_policy(auth: AuthConfig, http_host: str) -> AccessPolicy | None:
    """The policy for ``auth``; ``None`` means every client is let in.

    That is allowed only on a loopback listener or when ``auth.allow_anonymous``
    says so explicitly: a node that other machines can reach refuses to start
    without tokens rather than serve anyone by default.
    """
    tokens = parse_tokens(auth.tokens)
    if tokens:
        return AccessPolicy(tokens)
    if auth.allow_anonymous or is_loopback_host(http_host):
        return None
    raise InvalidInput(
        f"http.host = {http_host!r} is reachable from other machines and no client tokens "
        "are configured: set auth.tokens (DYNAQ_AUTH_TOKENS=NAME:TOKEN:GRANTS,...), or set "
        "auth.allow_anonymous = true (DYNAQ_AUTH_ALLOW_ANONYMOUS=true) to serve anyone who "
        "can connect"
    )
