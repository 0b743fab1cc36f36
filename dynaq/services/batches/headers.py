"""Batch headers: created once, then changed only by versioned (CAS) updates.

Every header write is ``put_if_absent`` (create) or ``put_if_version`` (update),
and a header is removed with ``delete`` together with its blocks: storage never
mixes plain and conditional writes on a key (Cassandra orders the two with
different clocks). Exactly one successful update can flip ``complete``, so a
completion is reported once, by the node whose update made it, to every
completion listener.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.errors import BatchNotFound, DynaqError, StorageError, WrongBatchMode
from dynaq.metrics import Metrics
from dynaq.services.batches.records import BatchHeader, Completion, CompletionListener
from dynaq.storage.base import Store

log = logging.getLogger(__name__)

JSON_SAFE_IDS = 2**53 - 1
CAS_TRIES = 64
"""Conditional-put attempts before a record that keeps changing is reported as
a storage error (each lost attempt means another writer made progress)."""

Change = Callable[[BatchHeader], Completion | None]
"""Mutates a header; returns a completion if it made the batch complete; may
raise to refuse the update."""


class Headers:
    """Reads, creates, updates and removes batch headers; dispatches completions."""

    def __init__(self, store: Store, clock: Clock, metrics: Metrics) -> None:
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self.listeners: list[CompletionListener] = []
        self.locks: dict[int, asyncio.Lock] = {}
        self.lock_users: dict[int, int] = {}

    async def read(self, batch_id: int) -> tuple[BatchHeader, int]:
        """The header and its version; :class:`BatchNotFound` if there is none."""
        item = await self._store.get(keys.batch_header(batch_id))
        if item is None:
            raise BatchNotFound(f"batch {batch_id} does not exist")
        return BatchHeader.decode(item.value), item.version

    async def get(self, batch_id: int, mode: str | None = None) -> BatchHeader:
        """The header, checked to be of ``mode`` (when given)."""
        header, _ = await self.read(batch_id)
        if mode is not None and header.mode != mode:
            raise WrongBatchMode(f"batch {batch_id} is an {header.mode} batch")
        return header

    async def create(self, header: BatchHeader) -> int:
        """Store ``header`` under a fresh batch id; return the id."""
        for _ in range(8):
            # Below 2^53: Carlyle's clients read batch ids as JSON numbers.
            batch_id = secrets.randbelow(JSON_SAFE_IDS) + 1
            if await self._store.put_if_absent(keys.batch_header(batch_id), header.encode()):
                return batch_id
        raise StorageError("could not draw an unused batch id")

    async def update(self, batch_id: int, change: Change) -> tuple[BatchHeader, Completion | None]:
        """Apply ``change`` to the header with a version check, retrying on races.

        ``change`` mutates the header and returns a completion when it made the
        batch complete; it may raise to refuse. Exactly one successful update
        can flip ``complete``, so a completion is reported once.
        """
        lock = self.locks.setdefault(batch_id, asyncio.Lock())
        self.lock_users[batch_id] = self.lock_users.get(batch_id, 0) + 1
        try:
            async with lock:  # no conflicts among this node's own updates
                return await self._update_locked(batch_id, change)
        finally:
            # Forget the lock with its last user: one per live batch, not per batch ever seen.
            self.lock_users[batch_id] -= 1
            if not self.lock_users[batch_id]:
                del self.lock_users[batch_id]
                self.locks.pop(batch_id, None)

    async def _update_locked(
        self, batch_id: int, change: Change
    ) -> tuple[BatchHeader, Completion | None]:
        for _ in range(CAS_TRIES):
            header, version = await self.read(batch_id)
            done = change(header)
            header.updated_ms = self._clock.wall_ms()
            if done is not None:
                header.completed_ms = done.completed_ms
            ok = await self._store.put_if_version(
                keys.batch_header(batch_id), header.encode(), version
            )
            if ok is not None:
                if done is not None:
                    await self._completed(done)
                return header, done
        raise StorageError(f"batch {batch_id}: header kept changing under concurrent updates")

    def complete_if_done(self, batch_id: int, h: BatchHeader) -> Completion | None:
        """Mark ``h`` complete if it is closed and nothing is pending (for a :data:`Change`)."""
        if h.closed and not h.complete and h.pending <= 0:
            h.complete = True
            return Completion(batch_id, h.user_key, self._clock.wall_ms())
        return None

    async def _completed(self, done: Completion) -> None:
        self._metrics.incr("batches.completed.count")
        log.info("batch completed", extra={"batch_id": done.batch_id, "user_key": done.user_key})
        for listener in self.listeners:
            try:
                await listener(done)
            except DynaqError:
                log.exception("completion listener failed", extra={"batch_id": done.batch_id})

    async def remove(self, batch_id: int) -> None:
        """Delete the batch's blocks, then its header (last, so a removal cut
        short leaves a header behind and can be done again)."""
        start, end = keys.batch_blocks(batch_id)
        while True:
            blocks = await self._store.scan(start, end, 256)
            if not blocks:
                break
            await asyncio.gather(*(self._store.delete(k) for k, _ in blocks))
        await self._store.delete(keys.batch_header(batch_id))
