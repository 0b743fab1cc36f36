"""Node-to-node request authentication (pure: bytes and times in, verdicts out).

Every request to ``/internal/*`` carries one header::

    X-Dynaq-Peer-Auth: v1 t=<unix ms>,n=<32 hex nonce>,m=<64 hex HMAC-SHA256>

The MAC covers, one per line: ``dynaq-peer-v1``, the method, the *audience*
(the receiver's advertised HTTP address), the path with its query, ``t``, ``n``
and the hex SHA-256 of the body. Why each part:

* **The key** is HKDF-SHA256 of the cluster secret (``gossip.key``) under its own
  label, so it is unrelated to the gossip encryption key derived from the same
  secret: knowing one says nothing about the other.
* **The audience** binds a request to the node it was sent to: a hint captured
  on its way to one node is refused by every other.
* **Freshness**: ``t`` must be within ``window_s`` (30 s) of the receiver's clock,
  and a nonce is remembered until its ``t`` leaves that window, so a replay is
  refused while it is fresh and for its timestamp afterwards. The memory is
  bounded (``max_nonces``): when it is full, requests are refused rather than a
  nonce forgotten early (fail closed; hints are best effort, so a refusal costs
  latency, never correctness). A clock stepped backwards cannot bring a
  forgotten nonce back: anything that old is refused.
* **Clocks apart**: a request refused as stale gets the receiver's time in its
  challenge (``WWW-Authenticate: DynaqPeer realm=..., time="t=..,m=.."``), MAC'd
  with the peer key and bound to the receiver's audience so nobody without the
  key can make a node sign with a time of their choosing. The sender keeps that
  offset per peer and signs with the peer's time from then on (as AWS SDKs
  correct for clock skew from a refused request): a node whose clock was
  stepped still hands its hints over, and freshness stays judged by the
  receiver's clock alone, so a captured request is no more replayable than before.

Nothing here does I/O; the caller passes the clock (:class:`PeerVerifier`) or
the time (:func:`sign`).
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from dynaq.errors import Unauthorized

PEER_AUTH_HEADER = "X-Dynaq-Peer-Auth"
PEER_CHALLENGE = 'DynaqPeer realm="dynaq-internal"'
"""The ``WWW-Authenticate`` value of a refused node-to-node request."""
INTERNAL_PREFIX = "/internal/"
WINDOW_S = 30.0
MAX_NONCES = 100_000
"""Nonces remembered at most: at ~200 hint posts a second per peer (one per 5 ms
batch), about eight busy peers for a full 60 s window; ~10 MB."""

_VERSION = b"dynaq-peer-v1"
_SALT = b"dynaq"
_INFO = b"dynaq internal http v1"
_TIME_VERSION = b"dynaq-peer-time-v1"
_HEADER = re.compile(r"v1 t=(\d{1,16}),n=([0-9a-f]{32}),m=([0-9a-f]{64})")
_CHALLENGE_TIME = re.compile(r'time="t=(\d{1,16}),m=([0-9a-f]{64})"')
SKEW_NOTICE_MS = 1_000
"""Offsets smaller than this are treated as none: the request's own latency."""


def hkdf_sha256(ikm: bytes, salt: bytes, info: bytes, length: int = 32) -> bytes:
    """HKDF (RFC 5869) with SHA-256: extract, then expand to ``length`` bytes."""
    if not 0 < length <= 255 * 32:
        raise ValueError("HKDF-SHA256 yields 1..8160 bytes")
    prk = hmac.digest(salt, ikm, "sha256")
    okm, block = b"", b""
    for counter in range(1, -(-length // 32) + 1):
        block = hmac.digest(prk, block + info + bytes([counter]), "sha256")
        okm += block
    return okm[:length]


def derive_peer_key(secret: str) -> bytes:
    """The 32-byte key node-to-node HTTP requests are signed with, from ``gossip.key``."""
    if not secret:
        raise ValueError("a peer key needs a non-empty cluster secret")
    return hkdf_sha256(secret.encode(), _SALT, _INFO)


def new_nonce() -> str:
    """128 random bits, hex: a collision within one window is not a concern."""
    return secrets.token_hex(16)


def _mac(
    key: bytes, method: str, audience: str, path: str, body: bytes, t_ms: int, nonce: str
) -> str:
    signed = b"\n".join(
        [
            _VERSION,
            method.upper().encode(),
            audience.encode(),
            path.encode(),
            str(t_ms).encode(),
            nonce.encode(),
            hashlib.sha256(body).hexdigest().encode(),
        ]
    )
    return hmac.new(key, signed, hashlib.sha256).hexdigest()


def _time_mac(key: bytes, audience: str, t_ms: int) -> str:
    signed = b"\n".join([_TIME_VERSION, audience.encode(), str(t_ms).encode()])
    return hmac.new(key, signed, hashlib.sha256).hexdigest()


def time_challenge(key: bytes, audience: str, t_ms: int) -> str:
    """The challenge of a request refused as stale: the receiver's time, MAC'd."""
    return f'{PEER_CHALLENGE}, time="t={t_ms},m={_time_mac(key, audience, t_ms)}"'


def sign(
    key: bytes, method: str, audience: str, path: str, body: bytes, t_ms: int, nonce: str
) -> str:
    """The :data:`PEER_AUTH_HEADER` value for one request."""
    return f"v1 t={t_ms},n={nonce},m={_mac(key, method, audience, path, body, t_ms, nonce)}"


@dataclass(frozen=True, slots=True)
class PeerStamp:
    """A parsed :data:`PEER_AUTH_HEADER`: not yet verified."""

    t_ms: int
    nonce: str
    mac: str


def parse_stamp(header: str | None) -> PeerStamp:
    """Parse the header; :class:`Unauthorized` when it is missing or malformed."""
    if header is None:
        raise Unauthorized(f"node-to-node request without {PEER_AUTH_HEADER}", PEER_CHALLENGE)
    m = _HEADER.fullmatch(header.strip())
    if m is None:
        raise Unauthorized(f"malformed {PEER_AUTH_HEADER}", PEER_CHALLENGE)
    return PeerStamp(int(m[1]), m[2], m[3])


class PeerSigner:
    """Signs outgoing node-to-node requests with the cluster's peer key."""

    def __init__(self, key: bytes, now_ms: Callable[[], int]) -> None:
        self._key = key
        self._now_ms = now_ms
        self._offsets: dict[str, int] = {}  # audience -> its clock minus ours, ms

    def header(self, method: str, audience: str, path: str, body: bytes) -> str:
        """A fresh :data:`PEER_AUTH_HEADER` value (new nonce, the peer's time as
        far as we know it)."""
        t_ms = self._now_ms() + self._offsets.get(audience, 0)
        return sign(self._key, method, audience, path, body, t_ms, new_nonce())

    def offset_ms(self, audience: str) -> int:
        """How far ``audience``'s clock is believed to be ahead of ours (ms)."""
        return self._offsets.get(audience, 0)

    def learn(self, audience: str, challenge: str | None) -> bool:
        """Take the peer's time from the challenge of a refused request.

        True when the offset changed, so the caller re-signs and retries once.
        A challenge without a time, or whose MAC does not check out with our
        key for that audience, teaches nothing.
        """
        m = _CHALLENGE_TIME.search(challenge or "")
        if m is None:
            return False
        t_ms = int(m[1])
        if not hmac.compare_digest(_time_mac(self._key, audience, t_ms), m[2]):
            return False
        offset = t_ms - self._now_ms()
        if abs(offset) < SKEW_NOTICE_MS:
            offset = 0
        old = self._offsets.get(audience, 0)
        if abs(offset - old) < SKEW_NOTICE_MS:
            return False
        if offset:
            self._offsets[audience] = offset
        else:
            self._offsets.pop(audience, None)
        return True


class PeerVerifier:
    """Checks incoming node-to-node requests: MAC, freshness, and no replay."""

    def __init__(
        self,
        key: bytes,
        now_ms: Callable[[], int],
        window_s: float = WINDOW_S,
        max_nonces: int = MAX_NONCES,
    ) -> None:
        self._key = key
        self._now_ms = now_ms
        self._window_ms = int(window_s * 1000)
        self._max = max_nonces
        self._seen: dict[str, int] = {}  # nonce -> the time after which its t is stale
        self._expiries: list[tuple[int, str]] = []  # heap of the same, oldest first
        self._forgotten_through = 0  # the latest expiry pruned

    def check_stamp(self, header: str | None, audience: str) -> PeerStamp:
        """Parse the header and refuse a stale one (called before the body is read:
        a request that cannot pass is not read; the MAC needs the body)."""
        stamp = parse_stamp(header)
        self._fresh(stamp, self._now_ms(), audience)
        return stamp

    def verify(self, stamp: PeerStamp, method: str, audience: str, path: str, body: bytes) -> None:
        """Accept the request once, or raise :class:`Unauthorized`.

        The nonce is remembered only after the MAC checks out: strangers cannot
        fill the memory, only peers that hold the key.
        """
        now = self._now_ms()
        self._fresh(stamp, now, audience)
        want = _mac(self._key, method, audience, path, body, stamp.t_ms, stamp.nonce)
        if not hmac.compare_digest(want, stamp.mac):
            raise Unauthorized("node-to-node request with a bad MAC", PEER_CHALLENGE)
        self._remember(stamp, now)

    def remembered(self) -> int:
        """How many nonces are held now (for tests and metrics)."""
        return len(self._seen)

    def _fresh(self, stamp: PeerStamp, now: int, audience: str) -> None:
        if abs(now - stamp.t_ms) > self._window_ms:
            raise Unauthorized(
                "node-to-node request outside the time window (check the nodes' clocks)",
                time_challenge(self._key, audience, now),
            )

    def _remember(self, stamp: PeerStamp, now: int) -> None:
        while self._expiries and self._expiries[0][0] < now:
            expiry, nonce = heapq.heappop(self._expiries)
            del self._seen[nonce]
            self._forgotten_through = max(self._forgotten_through, expiry)
        expiry = stamp.t_ms + self._window_ms
        if expiry <= self._forgotten_through:
            # Only after the clock stepped back: its nonce may have been forgotten.
            raise Unauthorized("node-to-node request too old to check for replay", PEER_CHALLENGE)
        if stamp.nonce in self._seen:
            raise Unauthorized("replayed node-to-node request", PEER_CHALLENGE)
        if len(self._seen) >= self._max:
            raise Unauthorized("too many node-to-node requests in the window", PEER_CHALLENGE)
        self._seen[stamp.nonce] = expiry
        heapq.heappush(self._expiries, (expiry, stamp.nonce))
