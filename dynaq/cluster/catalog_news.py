"""Catalog news between nodes: the sending side (the route is :mod:`dynaq.api.internal`).

A node that changed a queue's or a topic's config (create, settings, delete,
subscribe, unsubscribe, history) tells every live peer before it answers the
client: one signed msgpack POST ``{"kind": ..., "name": ...}`` to
:data:`~dynaq.core.hints.CATALOG_NEWS_PATH` per peer, all in parallel, each
bounded by ``timeout_s``. The peer marks that record stale as the request
arrives (its next lookup reads the store, however slow the re-read is on a
loaded store) and re-reads it before it answers, so
an acknowledged change is acted on at once by every node that answered: no
node acks a message into a queue deleted elsewhere, or fans a publish out to a
subscription removed elsewhere, for a sync interval.

Guarantees and limits:

* :meth:`HttpCatalogNews.tell` never raises and returns within about ``timeout_s``
  (twice that when a peer's clock is apart and the request is signed again):
  the change it announces is already in the store and stands either way.
* A peer that does not answer in time, refuses, or runs an earlier version
  without the route (404) is logged (at most once a minute per peer and kind
  of failure) and sees the change at its next config sync (``sync.interval_s``),
  as before this news existed; a lookup of a queue whose cache entry is older
  than that interval reads through to the store anyway.
* Config changes are rare: nothing here runs per message.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

import aiohttp
import msgpack

from dynaq.clock import Clock
from dynaq.core.hints import CATALOG_NEWS_PATH
from dynaq.core.membership import Member, MembershipView
from dynaq.core.peer_auth import PEER_AUTH_HEADER, PeerSigner

log = logging.getLogger(__name__)

_MSGPACK = "application/msgpack"
_WARN_EVERY_S = 60.0


class HttpCatalogNews:
    """Tells the live peers which config record this node just changed.

    ``tell`` is the catalog's hook (:data:`dynaq.services.catalog_topics.CatalogNews`);
    :meth:`start` opens the HTTP session it sends with, :meth:`stop` closes it
    (before ``start`` and after ``stop`` nothing is sent: peers catch up at sync).
    """

    def __init__(
        self,
        signer: PeerSigner,
        view: MembershipView,
        clock: Clock,
        ssl_context: ssl.SSLContext | None = None,
        timeout_s: float = 3.0,
    ) -> None:
        self._signer = signer
        self._view = view
        self._clock = clock
        self._ssl = ssl_context
        self._timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None
        self._warned_at: dict[tuple[str, str], float] = {}
        self.delivered = 0
        """News a peer took (answered 200), for tests and metrics."""
        self.missed = 0
        """News a peer did not take (no answer in time, a refusal, an older version)."""

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout_s))

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def tell(self, kind: str, name: str) -> None:
        """Tell every live peer that ``kind`` record ``name`` changed; return once each
        answered or timed out. Never raises (see the module docs)."""
        session = self._session
        peers = [m for m in self._view.members if m.name != self._view.me.name]
        if session is None or not peers:
            return
        body = bytes(msgpack.packb({"kind": kind, "name": name}))
        await asyncio.gather(*(self._tell_one(session, peer, body) for peer in peers))

    async def _tell_one(self, session: aiohttp.ClientSession, peer: Member, body: bytes) -> None:
        try:
            status, challenge = await self._post(session, peer, body)
            if status == 401 and self._signer.learn(peer.http_addr, challenge):
                # The peer's clock is apart from ours: signed again with its time.
                status, _ = await self._post(session, peer, body)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._missed(peer, "no answer", logging.WARNING, error=repr(exc))
            return
        if status == 200:
            self.delivered += 1
        elif status == 404:
            # A node of an earlier version has no such route: it syncs as it always did.
            self._missed(peer, "no news route", logging.INFO, status=status)
        else:
            self._missed(peer, "refused", logging.WARNING, status=status)

    async def _post(
        self, session: aiohttp.ClientSession, peer: Member, body: bytes
    ) -> tuple[int, str | None]:
        headers = {
            "Content-Type": _MSGPACK,
            PEER_AUTH_HEADER: self._signer.header("POST", peer.http_addr, CATALOG_NEWS_PATH, body),
        }
        async with session.post(
            peer.base_url + CATALOG_NEWS_PATH, data=body, headers=headers, ssl=self._ssl or True
        ) as resp:
            await resp.read()
            return resp.status, resp.headers.get("WWW-Authenticate")

    def _missed(self, peer: Member, why: str, level: int, **extra: object) -> None:
        """Count a peer that did not take the news, and say so once a minute per peer
        and reason: a peer that is down misses every change, which must neither
        flood the log nor go unseen."""
        self.missed += 1
        now = self._clock.monotonic()
        if now - self._warned_at.get((peer.name, why), -_WARN_EVERY_S) >= _WARN_EVERY_S:
            self._warned_at[peer.name, why] = now
            log.log(
                level,
                "peer did not take catalog news: it sees the change at its next config sync",
                extra={"peer": peer.name, "reason": why, **extra},
            )
