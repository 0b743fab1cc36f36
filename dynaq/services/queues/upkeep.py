"""Background upkeep of queues: the dedup-record sweeper, purges of deleted queues
and the sweeper of finished task records.

A deleted queue's messages are removed by a purge task. Its tombstone (see
:mod:`dynaq.services.queue_records`) stays unpurged until the purge finished,
so any node resumes it: at start, and at every sweep round from the last
config reload (the deleting node may have died). Purges are idempotent.
Dedup records outlive their window only until the next sweep. Finished
tasks' records go once past their retention (:mod:`.task_retention`), swept
every minute a bounded number of pages at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import msgpack

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.errors import DynaqError
from dynaq.services.catalog import Catalog
from dynaq.services.queue_records import Tombstone
from dynaq.services.queues.dedup import dedup_bucket
from dynaq.services.queues.task_retention import SWEEP_INTERVAL_S, TaskRetention
from dynaq.storage.base import Delete, Store, prefix_end
from dynaq.tasks import cancel_and_wait, every

log = logging.getLogger(__name__)

WRITE_GRACE_S = 35.0
"""A request's longest life after its queue was looked up: the body read
(``http.body_timeout_s``, 30 s by default) and the store write."""


class Upkeep:
    """Owns the dedup sweeper, the purge tasks and the task-record sweeper."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        catalog: Catalog,
        dedup_window_s: float,
        task_retention: TaskRetention,
    ) -> None:
        self._store = store
        self._task_retention = task_retention
        self._task_sweeper: asyncio.Task[None] | None = None
        self._catalog = catalog
        self._clock = clock
        self._dedup_window_s = dedup_window_s
        self._sweeper: asyncio.Task[None] | None = None
        self._purges: dict[int, asyncio.Task[None]] = {}
        self._legacy_cursor: bytes | None = None
        self._counter: asyncio.Task[None] | None = None
        self.settle_s = catalog.recreate_after_s + WRITE_GRACE_S
        """How long after a delete a write to the old queue number may still land:
        until every node's cached config has expired (``recreate_after_s``) and a
        request admitted just before has read its body and committed."""

    async def start(self) -> None:
        """Resume interrupted purges and start sweeping dedup and task records."""
        for key in await self._store.list_keys(keys.PURGE, 10_000):
            self.start_purge(keys.purge_number(key))  # markers of earlier releases
        self.resume_purges()
        interval = max(1.0, min(60.0, self._dedup_window_s / 2))
        self._sweeper = asyncio.create_task(
            every(interval, self._round, clock=self._clock, what="dedup sweep"),
            name="dedup-sweeper",
        )
        self._task_sweeper = asyncio.create_task(
            every(
                SWEEP_INTERVAL_S,
                self._task_retention.sweep,
                clock=self._clock,
                what="task record sweep",
            ),
            name="task-record-sweeper",
        )

    async def _round(self) -> None:
        self.resume_purges()
        await self.sweep_dedup()

    def resume_purges(self) -> None:
        """Purge every deleted queue the last config reload found unpurged."""
        for tomb in list(self._catalog.tombstones.values()):
            self.start_purge(tomb.number, tomb)

    def count_in_background(self, numbers: list[int], add: Callable[[int, int], None]) -> None:
        """Count each queue's stored messages and ``add(number, n)`` them, off the start path."""

        async def count_all() -> None:
            for number in numbers:
                try:
                    add(number, await self.count(number))
                except DynaqError:
                    log.warning("counting stored messages failed", extra={"number": number})

        self._counter = asyncio.create_task(count_all(), name="queue-depth-count")

    async def wait_counted(self) -> None:
        """Wait for the start-up count (for tests)."""
        if self._counter is not None:
            await self._counter

    async def stop(self) -> None:
        """Stop the sweepers and pending purges (purges resume at the next start)."""
        await cancel_and_wait(self._counter)
        self._counter = None
        await cancel_and_wait(self._sweeper)
        self._sweeper = None
        await cancel_and_wait(self._task_sweeper)
        self._task_sweeper = None
        for t in list(self._purges.values()):
            await cancel_and_wait(t)

    async def sweep_dedup(self, limit: int = 100_000) -> int:
        """Delete dedup records whose window has passed; return how many.

        Buckets older than the one before the current are wholly expired and
        go by one range delete, whatever their size. Records of earlier
        releases (one key per id) are swept from a cursor that moves on each
        round, up to ``limit`` records a round, until none are left. Nothing
        to do on a store that expires them itself (by its own clock: a sweep by
        this node's clock would end windows early if it runs ahead).
        """
        if self._store.expires_itself(keys.DEDUP):
            return 0
        now_ms = self._clock.steady_wall_ms()  # the writer's dedup time (writes.py)
        bucket = dedup_bucket(now_ms, self._dedup_window_s)
        removed = await self._store.delete_range(*keys.dedup_buckets_before(bucket - 1))
        return removed + await self._sweep_legacy(now_ms, limit)

    async def _sweep_legacy(self, now_ms: int, limit: int) -> int:
        end = prefix_end(keys.DEDUP)
        start = self._legacy_cursor or keys.DEDUP
        removed = seen = 0
        while seen < limit:
            rows = await self._store.scan(start, end, 1000)
            if not rows:
                self._legacy_cursor = None  # wrapped: the next round starts over
                break
            seen += len(rows)
            stale = [k for k, v in rows if msgpack.unpackb(v)[1] <= now_ms]
            if stale:
                await self._store.write_batch([Delete(k) for k in stale])
                removed += len(stale)
            start = self._legacy_cursor = rows[-1][0] + b"\x00"
        return removed

    def start_purge(self, number: int, tomb: Tombstone | None = None) -> None:
        """Remove every message of a deleted queue, in the background."""
        if number in self._purges:
            return
        task = asyncio.get_running_loop().create_task(
            self._purge(number, tomb), name=f"purge-{number}"
        )
        self._purges[number] = task
        task.add_done_callback(lambda _t: self._purges.pop(number, None))

    async def _purge(self, number: int, tomb: Tombstone | None) -> None:
        start, end = keys.queue_messages(number)
        try:
            removed = await self._store.delete_range(start, end)
            removed += await self._drop_delayed(number)
            await self._store.delete_range(*keys.dedup_queue_range(number))
            bucket = dedup_bucket(self._clock.steady_wall_ms(), self._dedup_window_s)
            for b in (bucket - 1, bucket, bucket + 1):
                await self._store.delete_range(*keys.dedup_queue_in_bucket(b, number))
            if tomb is None:
                await self._store.delete(keys.purge_marker(number))
            elif self._clock.wall_ms() >= tomb.deleted_ms + int(self.settle_s * 1000):
                await self._catalog.mark_purged(tomb)
            # else: a write admitted before the delete (a node's cached config, a
            # body still arriving) may land after this pass; the tombstone stays
            # unpurged and the next round sweeps again, until none can.
        except DynaqError:  # the next round resumes it
            log.warning("queue purge failed; it will resume", exc_info=True)
            return
        log.info("queue messages purged", extra={"number": number, "removed": removed})

    async def _drop_delayed(self, number: int) -> int:
        """Delete the queue's messages still waiting for their delay. The delay mover
        drops one that falls due while its queue's tombstone stands, but a delay
        (up to 15 minutes) can outlast the tombstone, and then nothing would."""
        start, end, dropped = keys.DELAYED, keys.DELAYED + b"\xff", 0
        while True:
            rows = await self._store.scan(start, end, 1000)
            doomed = [Delete(k) for k, _ in rows if keys.delayed_fields(k)[1] == number]
            if doomed:
                await self._store.write_batch(doomed)
                dropped += len(doomed)
            if len(rows) < 1000:
                return dropped
            start = rows[-1][0] + b"\x00"

    async def wait_for_purges(self) -> None:
        """Wait until every pending purge finished (for tests and shutdown)."""
        while self._purges:
            await asyncio.gather(*list(self._purges.values()), return_exceptions=True)

    async def count(self, number: int) -> int:
        """How many messages of queue ``number`` are stored (a key-only scan)."""
        start, _ = keys.queue_messages(number)
        n = 0
        while True:
            rows = await self._store.list_keys(start[:5], 10_000, start if n else None)
            n += len(rows)
            if len(rows) < 10_000:
                return n
            start = rows[-1]
