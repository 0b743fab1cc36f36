"""Retention: messages older than their queue's ``retention_s`` are removed.

A message id carries the time it was drawn (its enqueue time, also for
delayed messages), and ids within a lane are time-ordered, so every expired
message of a lane lies in one key range from the lane's start
(:func:`dynaq.core.ids.first_id_at`). The sweeper reads only that range: its
cost is the expired messages plus one short read per lane of its slice, never
the live backlog.

Guarantees: a message is never removed before ``retention_s`` after its
enqueue by the sweeping node's clock; it is removed within one sweep interval
after that (in flight or not, as SQS does). Each node sweeps its own slice,
so the ring sweeps every lane once per interval. Messages of a dead-letter
queue count from their move (they are new messages there). An expiring
message that is a batch item fails its item, as dead-lettering does, so its
batch still completes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.ids import first_id_at, lane_start
from dynaq.core.membership import MembershipView
from dynaq.core.messages import decode
from dynaq.metrics import Metrics
from dynaq.services.catalog import Catalog, QueueInfo
from dynaq.services.queues.dead_letters import FailureListener
from dynaq.services.queues.state import QueueStates
from dynaq.storage.base import Delete, Store
from dynaq.tasks import cancel_and_wait, every

log = logging.getLogger(__name__)

_CHUNK = 1000
_CLOCK_SLACK_MS = 60_000
"""How far another node's clock may lag the one that created a queue (an id drawn
by it then reads older than the queue) before a sweep would miss such a message."""
_FIRST_SWEEP_AFTER_S = 5.0
"""How soon after the node starts its first sweep runs (it has just taken its slice)."""


class RetentionSweeper:
    """Removes this node's slice's expired messages every ``interval_s``."""

    def __init__(
        self,
        store: Store,
        catalog: Catalog,
        clock: Clock,
        view: MembershipView,
        states: QueueStates,
        metrics: Metrics,
        serving: Callable[[], bool],
        interval_s: float = 60.0,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._clock = clock
        self._view = view
        self._states = states
        self._metrics = metrics
        self._serving = serving
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # one sweep at a time: depth is counted once
        self.failure_listeners: list[FailureListener] = []
        """Told ``(id, attributes)`` of expiring messages with attributes (shared with
        dead-lettering: both fail a batch item)."""

    def start(self) -> None:
        self._task = asyncio.create_task(
            # The first sweep soon after start, not an interval later: a node
            # restarted more often than the interval would otherwise never sweep.
            every(
                self.interval_s,
                self.sweep,
                clock=self._clock,
                what="retention sweep",
                first_after_s=min(self.interval_s, _FIRST_SWEEP_AFTER_S),
            ),
            name="retention-sweeper",
        )

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def sweep(self) -> int:
        """Remove the expired messages of every queue in this node's slice; return how many."""
        removed = 0
        if not self._serving():
            return 0  # joining or draining: the slice is not settled
        async with self._lock:
            for name in self._catalog.queue_names():
                info = self._catalog.cached_queue(name)
                if info is not None:
                    removed += await self._sweep_queue(info)
        return removed

    async def _tell_failed(self, info: QueueInfo, ids: list[int], values: list[bytes]) -> None:
        """Expiry is a failure for whoever tracks the message (a batch item): told
        before the delete, so a listener that raises keeps the messages for the
        next sweep rather than lose its item."""
        if not self.failure_listeners:
            return
        tagged = []
        for mid, raw in zip(ids, values, strict=True):
            attributes = decode(mid, raw).attributes
            if attributes:
                tagged.append((mid, attributes))
        if tagged:
            for listener in self.failure_listeners:
                await listener(info, tagged, "expired")

    async def _sweep_queue(self, info: QueueInfo) -> int:
        cutoff_ms = self._clock.wall_ms() - int(info.settings.retention_s * 1000)
        if cutoff_ms < info.created_ms - _CLOCK_SLACK_MS:
            # Younger than its retention: nothing in it can have expired, so no lane
            # is read (a sweep reads every lane of the slice: on Cassandra, a query each).
            return 0
        mine = self._view.my_slice
        removed = 0
        for lane in range(mine.lo, mine.hi):
            start = keys.message(info.number, lane_start(lane))
            end = keys.message(info.number, first_id_at(lane, cutoff_ms))
            while True:
                rows = await self._store.scan(start, end, _CHUNK)
                if not rows:
                    break
                ids = [keys.message_id(k) for k, _ in rows]
                await self._tell_failed(info, ids, [v for _, v in rows])
                await self._store.write_batch([Delete(k) for k, _ in rows])
                st = self._states.get(info.number)
                if st is not None:
                    st.note_deleted(ids)
                    for i in ids:
                        st.forget(i)
                removed += len(rows)
                if len(rows) < _CHUNK:
                    break
                start = rows[-1][0] + b"\x00"
        if removed:
            self._states.add_depth(info.number, -removed)
            self._metrics.incr(f"{info.name}.expired.count", removed)
            log.info("expired messages removed", extra={"queue": info.name, "count": removed})
        return removed
