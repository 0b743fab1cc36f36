"""Each queue's depth: how many messages it stores (visible and in flight; delayed
messages join it when due).

Where the store keeps message counts in the transaction of every write
(:meth:`~dynaq.storage.base.Store.message_counts`: LMDB, memory), they are the
figure: exact for the whole store whichever process wrote (a node's workers,
a node restarted on its data), and nothing is recounted at start. Elsewhere
(Cassandra, Riak) this node counts: the messages stored when it started
(counted in the background, O(messages)) plus what passes through it, so in a
ring each node's figure is its own share.

The gauges (``<queue>.depth.count``, ``dynaq_queue_depth``) are read
synchronously at every statsd flush and scrape: they show the counts as last
read, at most :data:`REFRESH_S` old, and this node's writes since.
"""

from __future__ import annotations

import asyncio

from dynaq.clock import Clock
from dynaq.services.catalog import Catalog, QueueInfo
from dynaq.services.queues.state import QueueStates
from dynaq.services.queues.upkeep import Upkeep
from dynaq.storage.base import Store
from dynaq.tasks import cancel_and_wait, every

REFRESH_S = 1.0
"""How often the gauges' copy of the store's counts is read again."""


class QueueDepths:
    """The depth of each queue, from the store's counts where it keeps them."""

    def __init__(
        self,
        store: Store,
        catalog: Catalog,
        states: QueueStates,
        upkeep: Upkeep,
        clock: Clock,
        shared_store: bool = False,
    ) -> None:
        """``shared_store``: the other members of this node's ring write this same
        store (a node's workers), so its counts are the whole ring's."""
        self._store = store
        self._catalog = catalog
        self._states = states
        self._upkeep = upkeep
        self._clock = clock
        self._shared = shared_store
        self.kept_by_store = False
        """Whether the store keeps the counts (known after :meth:`start`)."""
        self._refresher: asyncio.Task[None] | None = None

    def _numbers(self) -> list[int]:
        infos = map(self._catalog.cached_queue, self._catalog.queue_names())
        return [info.number for info in infos if info is not None]

    async def start(self) -> None:
        """Read the store's counts, or count stored messages in the background (so a
        node with a deep backlog serves at once: its depth is short until then)."""
        numbers = self._numbers()
        counts = await self._store.message_counts(numbers)
        if counts is None:
            self._upkeep.count_in_background(numbers, self._states.add_depth)
            return
        self.kept_by_store = True
        for number, n in zip(numbers, counts, strict=True):
            self._states.set_depth(number, n)
        self._refresher = asyncio.create_task(
            every(REFRESH_S, self.refresh, clock=self._clock, what="queue depth refresh"),
            name="queue-depth-refresh",
        )

    async def stop(self) -> None:
        await cancel_and_wait(self._refresher)
        self._refresher = None

    async def refresh(self) -> None:
        """Read every queue's count into the gauges' copy."""
        numbers = self._numbers()
        counts = await self._store.message_counts(numbers)
        for number, n in zip(numbers, counts or (), strict=False):
            self._states.set_depth(number, n)

    async def of(self, info: QueueInfo) -> int:
        """The queue's depth now (the store's count, or this node's)."""
        if not self.kept_by_store:
            return self._states.depth(info.number)
        counts = await self._store.message_counts([info.number])
        n = 0 if counts is None else counts[0]
        self._states.set_depth(info.number, n)
        return n

    async def of_ring(self, info: QueueInfo, alone: bool) -> int | None:
        """How many messages the queue stores over the whole ring, when this node
        knows (``alone`` in its ring, or its peers share its store), else ``None``:
        each member then tells its own slice's."""
        if self.kept_by_store and (alone or self._shared):
            return await self.of(info)
        if alone:
            return self._states.depth(info.number)
        return None
