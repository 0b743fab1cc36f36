"""``GET /metrics`` of a node of several workers: every worker's figures, on every scrape.

The workers share the node's port (``SO_REUSEPORT``), so the kernel hands a
scrape to any one of them. That worker asks each other worker for its own
exposition at :data:`WORKER_METRICS_PATH` on the other's private 127.0.0.1 port
(signed as between nodes, :mod:`dynaq.core.peer_auth`: it carries no client
token), all at once, each within :data:`SCRAPE_TIMEOUT_S`, and answers with
:func:`~dynaq.prometheus.merge_workers` of them all: every series labelled
``worker="<member name>"``. A worker that does not answer in time (dead,
restarting, stuck) is left out of that scrape, which says so in a comment line
and ``dynaq_worker_scrape_ok{worker="..."} 0``; the others' series are there as
ever, so no series vanishes because of where the connection landed.

A node of one worker (the default) has none of this: nothing is installed, and
``/metrics`` answers as it always did (no label, no request).

Which workers there are, and the signer of their ring, come from the node
(:mod:`dynaq.node.root`, from the role the supervisor handed this worker);
where each one is now comes from the ring's view (a worker started again after
dying young gets new ports, which gossip announces): one not in the view is
left out.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from dynaq.api.keys import METRICS
from dynaq.core.membership import Member, MembershipView
from dynaq.core.peer_auth import PEER_AUTH_HEADER, PeerSigner
from dynaq.errors import NotFound
from dynaq.prometheus import WorkerText, merge_workers

WORKER_METRICS_PATH = "/internal/v1/metrics"
"""A worker's own figures, in the Prometheus text format (only on a node of several
workers; signed like every ``/internal/`` request)."""
SCRAPE_TIMEOUT_S = 1.0
"""How long a scrape waits for another worker's figures before leaving it out."""


class WorkerScrape:
    """Gathers the other workers' own figures and merges them with this one's."""

    def __init__(
        self,
        signer: PeerSigner,
        view: MembershipView,
        workers: list[str],
        timeout_s: float = SCRAPE_TIMEOUT_S,
    ) -> None:
        self._signer = signer
        self._view = view
        self._workers = workers
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    async def merged(self, mine: bytes) -> bytes:
        """Every worker's figures (``mine``: this worker's own), each labelled."""
        me = self._view.me.name
        # Where each worker is now: the ring's view (a worker started again after
        # dying young gets new ports, announced by gossip). One not in it is left out.
        live = {m.name: m for m in self._view.members}
        others = [w for w in self._workers if w != me]
        answers = await asyncio.gather(*(self._ask(w, live.get(w)) for w in others))
        by_name = dict(zip(others, answers, strict=True))
        parts = [WorkerText(w, mine) if w == me else by_name[w] for w in self._workers]
        return merge_workers(parts)

    async def _ask(self, name: str, member: Member | None) -> WorkerText:
        if member is None:
            return WorkerText(name, None, "not in the ring of workers")
        path = WORKER_METRICS_PATH
        headers = {PEER_AUTH_HEADER: self._signer.header("GET", member.http_addr, path, b"")}
        try:
            async with self._client().get(member.base_url + path, headers=headers) as r:
                body = await r.read()
                if r.status != 200:
                    return WorkerText(name, None, f"it answered {r.status}")
                return WorkerText(name, body)
        except TimeoutError:
            return WorkerText(name, None, f"no answer within {self._timeout_s:g} s")
        except (aiohttp.ClientError, OSError) as exc:
            return WorkerText(name, None, f"unreachable ({type(exc).__name__})")

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            # A connection per request: loopback makes it cheap, and a kept-alive
            # one to a worker that has since died would cost that worker a scrape.
            self._session = aiohttp.ClientSession(
                timeout=self._timeout, connector=aiohttp.TCPConnector(force_close=True)
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


WORKER_SCRAPE = web.AppKey("worker_scrape", WorkerScrape)


async def serve_own(request: web.Request) -> web.Response:
    """``GET /internal/v1/metrics``: this worker's own figures (never the others')."""
    text = request.app[METRICS].exposition()
    if text is None:
        raise NotFound("Prometheus metrics are off (stats.prometheus = false)")
    return web.Response(body=text, content_type="text/plain", charset="utf-8")


def install(app: web.Application, scrape: WorkerScrape) -> None:
    """On a worker of a node of several: merge every worker's figures into
    ``/metrics`` and serve this one's to the others."""
    app[WORKER_SCRAPE] = scrape
    app.router.add_get(WORKER_METRICS_PATH, serve_own, allow_head=False)

    async def close(_: web.Application) -> None:
        await scrape.close()

    app.on_cleanup.append(close)
