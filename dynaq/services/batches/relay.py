"""Completion delivery: every durable completion reaches the listeners, however nodes fail.

The update that completes a batch first stores a completion record
(:mod:`~dynaq.services.batches.headers`), so the flip and a durable trace of
it are never apart. Then:

1. the node that made the flip delivers it at once (the listeners, then the
   header's ``announced`` flag, then the record's removal);
2. if that fails, this node's relay task retries it with backoff while the node
   runs;
3. if the node dies first, it delivers every record it finds when it starts
   again (a record outlives its delivery only when the node delivering it died
   or stopped, and the node that died is usually the one that restarts: the
   event then waits for the restart, not for the reaper's grace of minutes);
4. if it never comes back, the reaper (one node of the ring) sweeps records
   older than a grace period and delivers them; and a header that is complete
   but not announced without any record left (a flip whose outcome the store
   reported as unknown and that applied later) is delivered from the header scan.

Guarantees: each completion is delivered at least once to every listener and
announced once; listeners must tolerate a repeat (a delivery that succeeded
but whose announcement failed is retried). The topic publisher does: its
event carries the dedup id ``batch-completed:<id>``. A listener error that
cannot pass by retrying (:class:`~dynaq.errors.NotFound`, such as a completion
topic that does not exist, or :class:`~dynaq.errors.InvalidInput`) drops that
listener's delivery with an error log, as before; any other error is retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.errors import BatchNotFound, DynaqError, InvalidInput, NotFound, StorageError
from dynaq.metrics import Metrics
from dynaq.services.batches.headers import Headers
from dynaq.services.batches.records import (
    BatchHeader,
    Completion,
    CompletionListener,
    decode_completion,
)
from dynaq.storage.base import Store
from dynaq.tasks import cancel_and_wait

log = logging.getLogger(__name__)


class CompletionRelay:
    """Delivers completions to the listeners, retrying until each is announced."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        headers: Headers,
        metrics: Metrics,
        *,
        retry_s: float = 1.0,
        max_retry_s: float = 5.0,
    ) -> None:
        self._store = store
        self._clock = clock
        self._headers = headers
        self._metrics = metrics
        self._retry_s = retry_s
        self._max_retry_s = max_retry_s
        self.listeners: list[CompletionListener] = []
        self.waiting: dict[bytes, Completion] = {}
        """Completions this node retries, by record key."""
        self._task: asyncio.Task[None] | None = None
        self._orphans: asyncio.Task[None] | None = None
        self._running = False
        self._cursor = keys.BATCH_COMPLETION

    def start(self, limit: int = 1000) -> None:
        """Start retrying, and deliver the records left in the store (in the background)."""
        self._running = True
        self._orphans = asyncio.create_task(
            self._deliver_left(limit), name="batch-completion-restart"
        )
        self._start_retries()

    async def stop(self) -> None:
        """Stop retrying; what is still waiting stays stored for the next start or the
        reaper's sweep."""
        self._running = False
        await cancel_and_wait(self._orphans)
        self._orphans = None
        await cancel_and_wait(self._task)
        self._task = None

    async def _deliver_left(self, limit: int, pages: int = 100) -> None:
        """Deliver every completion record in the store, whatever its age (at most
        ``pages`` pages of ``limit``): left by a node that died, most often this one
        before its restart. Another node delivering the same record right now is
        no harm (the listeners are once-only or tolerate a repeat); a record whose
        flip has not applied yet is dropped, and its node delivers the flip
        itself. A record that fails goes to this node's retries; a scan that
        fails is tried again with the retries' backoff while the node runs."""
        end = keys.BATCH_COMPLETION + b"\xff" * 25
        delay = self._retry_s
        while self._running:
            cursor = keys.BATCH_COMPLETION
            resolved = 0
            try:
                for _ in range(pages):
                    rows = await self._store.scan(cursor, end, limit)
                    for key, raw in rows:
                        resolved += await self._resolve(key, raw, older_than_ms=None, keep=True)
                    if len(rows) < limit:
                        break
                    cursor = rows[-1][0] + b"\x00"
            except DynaqError as exc:
                log.warning(
                    "delivering the completions left at start failed; retrying",
                    extra={"error": str(exc)},
                )
                await self._clock.sleep(delay)
                delay = min(delay * 2, self._max_retry_s)
                continue
            if resolved:
                log.info(
                    "resolved completion records left by an earlier run",
                    extra={"records": resolved},
                )
            return

    def watch(self, done: Completion, record: bytes) -> None:
        """Check ``record`` soon: the update that would complete its batch failed with
        an unknown outcome (it may have applied). A retry delivers the completion
        if the header says complete, or drops the record if it does not."""
        self.waiting[record] = done
        self._start_retries()

    async def deliver(self, done: Completion, record: bytes) -> None:
        """Deliver a completion whose flip is durable now; on failure, retry in the
        background (never raises a :class:`~dynaq.errors.DynaqError`)."""
        if not await self._try(done, record, check=False):
            self._metrics.incr("batches.completions.retried.count")
            self.waiting[record] = done
            self._start_retries()

    async def _try(self, done: Completion, record: bytes | None, *, check: bool = True) -> bool:
        """One delivery attempt; ``check`` first reads whether it is still due (a
        retry after the listeners had it but the announcement failed, or the
        batch was removed, needs only the record removed)."""
        try:
            if check:
                got = await self._headers.read_any(done.batch_id)
                if got is None or got[0].removing or not got[0].complete or got[0].announced:
                    if record is not None:
                        await self._store.delete(record)
                    return True
            for listener in self.listeners:
                try:
                    await listener(done)
                except (NotFound, InvalidInput):
                    # Permanent (the completion topic does not exist): retrying cannot
                    # help, and an undelivered completion would keep its batch forever.
                    log.exception(
                        "batch completion event dropped", extra={"batch_id": done.batch_id}
                    )
                    self._metrics.incr("batches.completions.dropped.count")
            await self._announce(done.batch_id)
            if record is not None:
                await self._store.delete(record)
        except DynaqError as exc:
            log.warning(
                "batch completion delivery failed; retrying",
                extra={"batch_id": done.batch_id, "error": str(exc)},
            )
            return False
        return True

    async def _announce(self, batch_id: int) -> None:
        def change(h: BatchHeader) -> Completion | None:
            h.announced = True
            return None

        with contextlib.suppress(BatchNotFound):  # removed meanwhile: nothing left to mark
            await self._headers.update(batch_id, change, touch=False)

    def _start_retries(self) -> None:
        if self._running and self.waiting and self._task is None:
            self._task = asyncio.create_task(self._retries(), name="batch-completion-relay")

    async def _retries(self) -> None:
        delay = self._retry_s
        try:
            while self.waiting:
                await self._clock.sleep(delay)
                for record, done in list(self.waiting.items()):
                    if await self._try(done, record):
                        self.waiting.pop(record, None)
                delay = min(delay * 2, self._max_retry_s)
        finally:
            self._task = None

    async def sweep(self, older_than_ms: int, limit: int) -> int:
        """Deliver stored completions recorded before ``older_than_ms`` (their node
        died or gave up) and drop records of updates that never applied; at most
        ``limit`` records per call, from a cursor. Returns how many records it resolved."""
        end = keys.BATCH_COMPLETION + b"\xff" * 25
        rows = await self._store.scan(self._cursor, end, limit)
        self._cursor = rows[-1][0] + b"\x00" if len(rows) == limit else keys.BATCH_COMPLETION
        resolved = 0
        for key, raw in rows:
            resolved += await self._resolve(key, raw, older_than_ms)
        return resolved

    async def _resolve(
        self, key: bytes, raw: bytes, older_than_ms: int | None, *, keep: bool = False
    ) -> bool:
        """Deliver one stored record if it is due (recorded before ``older_than_ms``;
        ``None``: whatever its age); return whether it was resolved. ``keep``: one
        that fails goes to this node's retries (else it stays for the next sweep)."""
        if key in self.waiting:
            return False  # this node's retries have it
        try:
            done, created_ms = decode_completion(raw)
        except StorageError:
            log.exception("dropping a corrupt batch completion record")
            await self._store.delete(key)
            return False
        if older_than_ms is not None and created_ms >= older_than_ms:
            return False  # its node is probably delivering it right now
        # Removed, a flip that never applied, or delivered already: _try only
        # drops the record.
        if await self._try(done, key):
            return True
        if keep:
            self.watch(done, key)
        return False

    async def deliver_unannounced(self, batch_id: int, header: BatchHeader) -> bool:
        """Deliver a complete header's completion that no record stands for."""
        return await self._try(self.completion_of(batch_id, header), None)

    @staticmethod
    def completion_of(batch_id: int, header: BatchHeader) -> Completion:
        return Completion(batch_id, header.user_key, header.completed_ms)
