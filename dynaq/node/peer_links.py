"""A ring node's node-to-node senders, built and run together.

* hints to the owners of other slices (and the lane handoffs of
  :mod:`dynaq.services.queues.slice_handoff`): :class:`~dynaq.cluster.hints.HttpPeerHints`;
* catalog news, so a config change made here is acted on by every live peer
  before it is acknowledged: :class:`~dynaq.cluster.catalog_news.HttpCatalogNews`;
* the in-flight handover a graceful leave sends to the next owners.

Every request is signed for the peer it goes to (the cluster secret), over the
scheme the peer advertises.
"""

from __future__ import annotations

import logging
import ssl

from dynaq.clock import Clock
from dynaq.cluster.catalog_news import HttpCatalogNews
from dynaq.cluster.hints import HttpPeerHints
from dynaq.cluster.leave_handover import hand_over
from dynaq.core.ids import lane_of
from dynaq.core.membership import MembershipView
from dynaq.core.peer_auth import PeerSigner
from dynaq.services.catalog import Catalog
from dynaq.services.queues import QueueService

log = logging.getLogger(__name__)


class PeerLinks:
    """Hints, catalog news and the leave handover of one ring node."""

    def __init__(
        self,
        signer: PeerSigner,
        view: MembershipView,
        clock: Clock,
        ssl_context: ssl.SSLContext | None,
        queues: QueueService,
        catalog: Catalog,
    ) -> None:
        self._signer = signer
        self._ssl = ssl_context
        self._queues = queues
        self.hints = HttpPeerHints(signer, ssl_context)
        self.catalog_news = HttpCatalogNews(signer, view, clock, ssl_context)
        queues.set_peer_hints(self.hints)
        catalog.tell_peers_with(self.catalog_news.tell)

    async def start(self) -> None:
        await self.hints.start()
        await self.catalog_news.start()

    async def hand_over(self) -> None:
        """Before leaving: the next owners keep this node's in-flight messages
        invisible until their deadlines instead of serving them at once. What a next
        owner did not take (it is leaving too: a ring stopped at once; or it is
        gone) is parked in the store for the first member back."""
        hints = self._queues.hints
        missed: set[str] = set()
        taken = await hand_over(hints.handover(), self._signer, self._ssl, missed=missed)
        log.info("in-flight messages handed over", extra={"peers": taken, "missed": sorted(missed)})
        if missed:
            self._queues.park_at_stop = True
            self._queues.park_only = lambda mid: hints.next_owner_name(lane_of(mid)) in missed

    async def stop(self) -> None:
        await self.hints.stop()
        await self.catalog_news.stop()
