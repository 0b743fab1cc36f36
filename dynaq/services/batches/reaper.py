"""Removing idle batches: one reaper per cluster, and the administrative sweep.

The reaper runs every ``reap_interval_s`` on the node the ring makes owner of
one fixed lane, and only while it holds the store lease
(:class:`~dynaq.core.leases.CasLease`, ``lease_s`` = 3 intervals) under
:data:`~dynaq.core.keys.BATCH_REAPER_LEASE`: two nodes that disagree about the
ring cannot both reap. Each round handles at most ``reap_batch`` headers from
a cursor, so a round's cost is bounded however many batches exist.

A round first runs the repair pass (:mod:`~dynaq.services.batches.reconcile`),
then looks at its page of headers. A batch is removed only when nothing about
it moved for its age limit plus ``skew_s`` (the clocks that stamped its
records may run ahead of the reaper's): not its header, not an add in flight,
and not any of its blocks (each ack stamps the block it clears, so a batch
that is busy being acked is never reaped, though its header may not change
for hours). The header is then marked ``removing`` with a version check, so
an update made since the check (a close, an add) stops the removal, and any
update after the mark is refused. A complete batch is never removed before
its completion was delivered.
"""

from __future__ import annotations

import asyncio
import logging
import zlib

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.leases import CasLease
from dynaq.core.membership import MembershipView
from dynaq.metrics import Metrics
from dynaq.services.batches.headers import Headers
from dynaq.services.batches.reconcile import Reconciler
from dynaq.services.batches.records import BatchHeader, Block
from dynaq.storage.base import Store
from dynaq.tasks import cancel_and_wait, every

log = logging.getLogger(__name__)

_REAPER = "batches-reaper"


class Reaper:
    """Deletes batches idle for longer than their age limit, with their blocks."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        view: MembershipView,
        metrics: Metrics,
        headers: Headers,
        reconciler: Reconciler,
        *,
        open_max_age_s: float,
        closed_max_age_s: float,
        reap_interval_s: float,
        reap_batch: int,
        skew_s: float,
    ) -> None:
        self._store = store
        self._clock = clock
        self._view = view
        self._metrics = metrics
        self._headers = headers
        self._reconciler = reconciler
        self._skew_ms = int(skew_s * 1000)
        self._open_max_age_s = open_max_age_s
        self._closed_max_age_s = closed_max_age_s
        self._reap_interval_s = reap_interval_s
        self._reap_batch = reap_batch
        self._task: asyncio.Task[None] | None = None
        self._cursor = 0
        self._lease: CasLease | None = None
        self.lane = zlib.crc32(_REAPER.encode()) % 1024
        """The ring lane whose owner is the reaper."""

    def start(self) -> None:
        if self._reap_interval_s > 0 and self._task is None:
            self._task = asyncio.create_task(self._loop(), name="batch-reaper")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    def is_reaper(self) -> bool:
        """Whether the ring makes this node the one reaper."""
        return self._view.owner_of_lane(self.lane).name == self._view.me.name

    async def take_lease(self) -> bool:
        """Fence the reaper in the store: two nodes that disagree about the ring
        cannot both hold a lease that has not expired."""
        name = self._view.me.name  # read each round: the lease follows this node's ring name
        if self._lease is None or self._lease.holder != name:
            self._lease = CasLease(
                self._store, keys.BATCH_REAPER_LEASE, name, self._clock, self._reap_interval_s * 3
            )
        return await self._lease.acquire()

    async def reap_once(self) -> tuple[int, int]:
        """One bounded reaper round: the repair pass, then at most ``reap_batch``
        headers from a cursor.

        Open batches idle for ``open_max_age_s`` and closed ones (complete or
        not) idle for ``closed_max_age_s`` are deleted with their blocks,
        with or without items (Carlyle's reaper skipped batches without items).
        """
        await self._reconciler.run()
        now = self._clock.wall_ms()
        open_before = now - int(self._open_max_age_s * 1000) - self._skew_ms
        closed_before = now - int(self._closed_max_age_s * 1000) - self._skew_ms
        start = keys.batch_header(self._cursor)
        end = keys.BATCH_HEADER + b"\xff" * 9
        rows = await self._store.scan(start, end, self._reap_batch)
        self._cursor = (
            0 if len(rows) < self._reap_batch else keys.batch_id_of_header(rows[-1][0]) + 1
        )
        removed = items = 0
        for key, raw in rows:
            batch_id = keys.batch_id_of_header(key)
            h = BatchHeader.decode(raw)
            if h.removing:  # a removal cut short: finish it
                await self._headers.remove(batch_id)
                continue
            await self._reconciler.check_header(batch_id, h)
            if await self._remove_if_idle(batch_id, h, closed_before if h.closed else open_before):
                removed += 1
                items += h.items
        if removed:
            self._metrics.incr("batches.reaped.count", removed)
            log.info("reaped batches", extra={"batches": removed, "items": items})
        return removed, items

    async def _remove_if_idle(
        self, batch_id: int, h: BatchHeader, before_ms: int, closed: bool | None = None
    ) -> bool:
        """Remove the batch if nothing about it moved since ``before_ms`` (and it is
        ``closed`` or open, when given); return whether it was removed."""

        def idle(x: BatchHeader) -> bool:
            return (
                (closed is None or x.closed == closed)
                and x.updated_ms < before_ms
                and all(a.started_ms < before_ms for a in x.adds)
                and not (x.complete and not x.announced)
            )

        if not idle(h) or await self._last_ack_ms(batch_id) >= before_ms:
            return False
        if await self._headers.mark_removing(batch_id, idle) is None:
            return False  # changed since it was read (or gone)
        await self._headers.remove(batch_id)
        return True

    async def _last_ack_ms(self, batch_id: int) -> int:
        """The latest ack any of the batch's blocks records (0 for none)."""
        last = 0
        start, end = keys.batch_blocks(batch_id)
        while True:
            rows = await self._store.scan(start, end, 256)
            for _, raw in rows:
                last = max(last, Block.decode(raw).last_ack_ms)
            if len(rows) < 256:
                return last
            start = rows[-1][0] + b"\x00"

    async def remove_older(self, mode: str, closed: bool, since_ms: int) -> tuple[int, int]:
        """Delete open (or closed) batches of ``mode`` (``exact`` or ``estimated``:
        the route's, whose admin permission was checked) last active before
        ``since_ms`` (the header, adds and block acks, as the reaper counts activity).

        Returns ``(batches removed, items they held)``. Scans every header in
        pages; an administrative call, not a hot path.
        """
        removed = items = 0
        after: bytes | None = None
        while True:
            page = await self._store.list_keys(keys.BATCH_HEADER, 500, after)
            if not page:
                return removed, items
            after = page[-1]
            got = await self._store.get_many(page)
            for key, item in zip(page, got, strict=True):
                if item is None:
                    continue
                h = BatchHeader.decode(item.value)
                if h.removing or h.closed != closed or h.mode != mode:
                    continue
                if await self._remove_if_idle(keys.batch_id_of_header(key), h, since_ms, closed):
                    removed += 1
                    items += h.items
                    self._metrics.incr("batches.reaped.count")

    async def _round(self) -> None:
        if self.is_reaper() and await self.take_lease():
            await self.reap_once()

    async def _loop(self) -> None:
        await every(
            self._reap_interval_s, self._round, clock=self._clock, what="batch reaper round"
        )
