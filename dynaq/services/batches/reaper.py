"""Removing idle batches: one reaper per cluster, and the administrative sweep.

The reaper runs every ``reap_interval_s`` on the node the ring makes owner of
one fixed lane, and only while it holds the store lease
(:class:`~dynaq.core.leases.CasLease`, ``lease_s`` = 3 intervals) under
:data:`~dynaq.core.keys.BATCH_REAPER_LEASE`: two nodes that disagree about the
ring cannot both reap. Each round handles at most ``reap_batch`` headers from
a cursor, so a round's cost is bounded however many batches exist.
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
from dynaq.services.batches.records import BatchHeader
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
        *,
        open_max_age_s: float,
        closed_max_age_s: float,
        reap_interval_s: float,
        reap_batch: int,
    ) -> None:
        self._store = store
        self._clock = clock
        self._view = view
        self._metrics = metrics
        self._headers = headers
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
        """One bounded reaper round: at most ``reap_batch`` headers from a cursor.

        Open batches idle for ``open_max_age_s`` and closed ones (complete or
        not) idle for ``closed_max_age_s`` are deleted with their blocks,
        with or without items (Carlyle's reaper skipped batches without items).
        """
        now = self._clock.wall_ms()
        open_before = now - int(self._open_max_age_s * 1000)
        closed_before = now - int(self._closed_max_age_s * 1000)
        start = keys.batch_header(self._cursor)
        end = keys.BATCH_HEADER + b"\xff" * 9
        rows = await self._store.scan(start, end, self._reap_batch)
        self._cursor = (
            0 if len(rows) < self._reap_batch else keys.batch_id_of_header(rows[-1][0]) + 1
        )
        removed = items = 0
        for key, raw in rows:
            h = BatchHeader.decode(raw)
            if h.updated_ms < (closed_before if h.closed else open_before):
                await self._headers.remove(keys.batch_id_of_header(key))
                removed += 1
                items += h.items
        if removed:
            self._metrics.incr("batches.reaped.count", removed)
            log.info("reaped batches", extra={"batches": removed, "items": items})
        return removed, items

    async def remove_older(self, closed: bool, since_ms: int) -> tuple[int, int]:
        """Delete open (or closed) batches last active before ``since_ms``.

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
                if h.closed == closed and h.updated_ms < since_ms:
                    await self._headers.remove(keys.batch_id_of_header(key))
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
