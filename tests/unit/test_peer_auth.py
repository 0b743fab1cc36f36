"""Node-to-node MACs (dynaq.core.peer_auth), bytes in and verdicts out: no server, no sockets."""

from __future__ import annotations

import pytest

from dynaq.cluster.swim import derive_key
from dynaq.core.peer_auth import (
    PeerSigner,
    PeerVerifier,
    derive_peer_key,
    hkdf_sha256,
    parse_stamp,
    sign,
)
from dynaq.errors import Unauthorized

KEY = derive_peer_key("cluster-secret")
NOW = 1_790_000_000_000
AUD = "10.0.0.2:8081"
PATH = "/internal/v1/hints"
BODY = b"\x81\xa6queues\x80"
NONCE = "0123456789abcdef0123456789abcdef"


class Clock:
    def __init__(self, ms: int = NOW) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def _verifier(clock: Clock, **kw: int) -> PeerVerifier:
    return PeerVerifier(KEY, clock, **kw)


def _accept(v: PeerVerifier, header: str, method: str = "POST", audience: str = AUD) -> None:
    v.verify(v.check_stamp(header, audience), method, audience, PATH, BODY)


def test_hkdf_matches_rfc_5869_test_case_1() -> None:
    okm = hkdf_sha256(bytes([0x0B] * 22), bytes(range(13)), bytes(range(0xF0, 0xFA)), 42)
    assert okm.hex() == (
        "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
    )


def test_the_http_key_is_not_the_gossip_key() -> None:
    assert derive_peer_key("s") == derive_peer_key("s") and len(derive_peer_key("s")) == 32
    assert derive_peer_key("s") != derive_peer_key("t")
    assert derive_peer_key("s") != derive_key("s")
    with pytest.raises(ValueError):
        derive_peer_key("")


def test_a_signed_request_is_accepted_once() -> None:
    clock = Clock()
    v = _verifier(clock)
    header = sign(KEY, "POST", AUD, PATH, BODY, NOW, NONCE)
    _accept(v, header)
    with pytest.raises(Unauthorized, match="replayed"):
        _accept(v, header)
    clock.ms += 29_000  # still inside the window: still a replay
    with pytest.raises(Unauthorized, match="replayed"):
        _accept(v, header)
    clock.ms += 2_000  # past the window: refused for its age
    with pytest.raises(Unauthorized, match="time window"):
        _accept(v, header)


def test_the_signer_signs_what_the_verifier_checks() -> None:
    clock = Clock()
    signer, v = PeerSigner(KEY, clock), _verifier(clock)
    first, second = (signer.header("POST", AUD, PATH, BODY) for _ in range(2))
    assert first != second  # a fresh nonce each time
    _accept(v, first)
    _accept(v, second)


@pytest.mark.parametrize(
    "forged",
    [
        {"body": b"\x81\xa6queues\x81"},
        {"path": "/internal/v1/hints?x=1"},
        {"method": "PUT"},
        {"audience": "10.0.0.3:8081"},  # signed for another node
        {"key": derive_peer_key("another-secret")},
    ],
)
def test_any_change_breaks_the_mac(forged: dict[str, object]) -> None:
    parts: dict[str, object] = {
        "key": KEY,
        "method": "POST",
        "audience": AUD,
        "path": PATH,
        "body": BODY,
        "t_ms": NOW,
        "nonce": NONCE,
    }
    header = sign(**{**parts, **forged})  # type: ignore[arg-type]
    with pytest.raises(Unauthorized, match="bad MAC"):
        _accept(_verifier(Clock()), header)


def test_a_tampered_header_breaks_the_mac() -> None:
    header = sign(KEY, "POST", AUD, PATH, BODY, NOW, NONCE)
    v = _verifier(Clock())
    later = header.replace(f"t={NOW}", f"t={NOW + 1000}")
    other_nonce = header.replace(NONCE, "f" * 32)
    for bad in (later, other_nonce):
        with pytest.raises(Unauthorized, match="bad MAC"):
            _accept(v, bad)
    assert v.remembered() == 0  # nothing unauthenticated is remembered


@pytest.mark.parametrize("skew_ms", [-30_001, 30_001, -3_600_000])
def test_stale_or_future_timestamps_are_refused_before_the_body(skew_ms: int) -> None:
    header = sign(KEY, "POST", AUD, PATH, BODY, NOW + skew_ms, NONCE)
    with pytest.raises(Unauthorized, match="time window"):
        _verifier(Clock()).check_stamp(header, AUD)


@pytest.mark.parametrize("skew_ms", [-3_600_000, 3_600_000, 45_000])
def test_a_signer_learns_the_peers_time_from_its_refusal(skew_ms: int) -> None:
    """A node whose clock was stepped still gets its requests in: the refusal
    carries the receiver's time (MAC'd), the signer adopts the offset for that
    peer only, and the verifier still judges freshness and replay by its own clock."""
    mine, theirs = Clock(), Clock(NOW + skew_ms)
    signer, v = PeerSigner(KEY, mine), _verifier(theirs)
    header = signer.header("POST", AUD, PATH, BODY)
    with pytest.raises(Unauthorized, match="time window") as refused:
        _accept(v, header)
    assert signer.learn(AUD, refused.value.challenge)
    assert signer.offset_ms(AUD) == skew_ms and signer.offset_ms("10.0.0.3:8081") == 0
    again = signer.header("POST", AUD, PATH, BODY)
    _accept(v, again)
    with pytest.raises(Unauthorized, match="replayed"):
        _accept(v, again)
    assert not signer.learn(AUD, refused.value.challenge)  # nothing new: no retry loop
    # The peer's clock is put right: one refusal, and the offset is dropped.
    theirs.ms = mine.ms
    with pytest.raises(Unauthorized, match="time window") as refused_again:
        _accept(v, signer.header("POST", AUD, PATH, BODY))
    assert signer.learn(AUD, refused_again.value.challenge) and signer.offset_ms(AUD) == 0


@pytest.mark.parametrize(
    "challenge",
    [
        None,
        'DynaqPeer realm="dynaq-internal"',
        # A time for another audience, or one not MAC'd with our key, teaches nothing:
        # nobody without the key can choose the time a node signs with.
        'DynaqPeer realm="dynaq-internal", time="t=1,m=' + "0" * 64 + '"',
    ],
)
def test_a_challenge_without_an_authentic_time_teaches_nothing(challenge: str | None) -> None:
    signer = PeerSigner(KEY, Clock())
    assert not signer.learn(AUD, challenge) and signer.offset_ms(AUD) == 0


def test_a_time_for_another_audience_teaches_nothing() -> None:
    v = _verifier(Clock(NOW + 3_600_000))
    with pytest.raises(Unauthorized) as refused:
        v.check_stamp(sign(KEY, "POST", AUD, PATH, BODY, NOW, NONCE), "10.0.0.3:8081")
    assert not PeerSigner(KEY, Clock()).learn(AUD, refused.value.challenge)


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "v2 t=1,n=" + "0" * 32 + ",m=" + "0" * 64,
        "v1 t=1,n=" + "0" * 31 + ",m=" + "0" * 64,
        "v1 t=1,n=" + "0" * 32 + ",m=" + "0" * 63,
        "v1 t=-1,n=" + "0" * 32 + ",m=" + "0" * 64,
        "Bearer abc",
    ],
)
def test_malformed_headers_are_refused(header: str | None) -> None:
    with pytest.raises(Unauthorized):
        parse_stamp(header)


def test_nonce_memory_is_bounded_and_fails_closed() -> None:
    clock = Clock()
    v = _verifier(clock, max_nonces=3)
    for i in range(3):
        _accept(v, sign(KEY, "POST", AUD, PATH, BODY, NOW, f"{i:032x}"))
    with pytest.raises(Unauthorized, match="too many"):
        _accept(v, sign(KEY, "POST", AUD, PATH, BODY, NOW, f"{9:032x}"))
    clock.ms += 31_000  # the three leave the window and are forgotten
    _accept(v, sign(KEY, "POST", AUD, PATH, BODY, clock.ms, f"{9:032x}"))
    assert v.remembered() == 1


def test_a_clock_stepped_back_cannot_revive_a_forgotten_nonce() -> None:
    clock = Clock()
    v = _verifier(clock)
    old = sign(KEY, "POST", AUD, PATH, BODY, NOW, NONCE)
    _accept(v, old)
    clock.ms += 60_000
    _accept(v, sign(KEY, "POST", AUD, PATH, BODY, clock.ms, "a" * 32))  # prunes `old`
    clock.ms = NOW + 1_000  # stepped back: `old` is inside the window again
    with pytest.raises(Unauthorized, match="too old"):
        _accept(v, old)
