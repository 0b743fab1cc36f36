"""The reaper's repair pass: finish what crashes and store failures left half done.

Each pass is bounded (``limit`` markers and ``limit`` completion records from
cursors) and touches only traces older than the grace period, so it does not
race the operation that left them while that operation still runs (repairs are
idempotent and would be correct anyway; the grace only saves work):

* a repair marker (an add, or an ack that emptied blocks, that did not finish):
  undo the batch's stale adds, count its emptied blocks, finish ``retiring``
  (:meth:`~dynaq.services.batches.settle.Settler.repair`), then drop the marker;
* a completion record: deliver it (:meth:`~dynaq.services.batches.relay.CompletionRelay.sweep`).

:meth:`Reconciler.check_header` is the backstop the reaper runs on every
header it scans anyway: a complete but unannounced header, a stale add, or
blocks left in ``retiring`` are repaired even if their trace was lost.
"""

from __future__ import annotations

import logging

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.errors import DynaqError, StorageError
from dynaq.services.batches.records import BatchHeader, decode_marker
from dynaq.services.batches.relay import CompletionRelay
from dynaq.services.batches.settle import Settler
from dynaq.storage.base import Store

log = logging.getLogger(__name__)


class Reconciler:
    """Repairs batches left inconsistent by crashes (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        settler: Settler,
        relay: CompletionRelay,
        *,
        grace_s: float,
        limit: int = 100,
    ) -> None:
        self._store = store
        self._clock = clock
        self._settler = settler
        self._relay = relay
        self._grace_ms = int(grace_s * 1000)
        self._limit = limit
        self._cursor = keys.BATCH_REPAIR

    def stale_before_ms(self) -> int:
        """Traces stamped before this (wall ms) belong to operations that ended."""
        return self._clock.wall_ms() - self._grace_ms

    async def run(self) -> int:
        """One bounded pass over markers and completion records; returns how many
        traces it resolved."""
        stale = self.stale_before_ms()
        end = keys.BATCH_REPAIR + b"\xff" * 25
        rows = await self._store.scan(self._cursor, end, self._limit)
        self._cursor = rows[-1][0] + b"\x00" if len(rows) == self._limit else keys.BATCH_REPAIR
        resolved = 0
        for key, raw in rows:
            try:
                created_ms, blocks = decode_marker(raw)
            except StorageError:
                log.exception("dropping a corrupt batch repair marker")
                await self._store.delete(key)
                continue
            if created_ms >= stale:
                continue
            batch_id = keys.batch_id_after(keys.BATCH_REPAIR, key)
            try:
                if await self._settler.repair(batch_id, blocks, stale):
                    await self._store.delete(key)
                    resolved += 1
            except DynaqError:
                log.exception(
                    "batch repair failed; retrying next round", extra={"batch_id": batch_id}
                )
        return resolved + await self._relay.sweep(stale, self._limit)

    async def check_header(self, batch_id: int, h: BatchHeader) -> None:
        """Repair what a scanned header shows unfinished (a backstop for lost traces)."""
        stale = self.stale_before_ms()
        try:
            if h.complete and not h.announced and h.completed_ms < stale:
                await self._relay.deliver_unannounced(batch_id, h)
            if h.retiring or any(a.started_ms < stale for a in h.adds):
                await self._settler.repair(batch_id, (), stale)
        except DynaqError:
            log.exception("batch repair failed; retrying next round", extra={"batch_id": batch_id})
