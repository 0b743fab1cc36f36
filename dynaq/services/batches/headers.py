"""Batch headers: created once, then changed only by versioned (CAS) updates.

Every header write is ``put_if_absent`` (create) or ``put_if_version`` (update),
and a header is removed with ``delete`` after it was marked ``removing`` and
its blocks were deleted: storage never mixes plain and conditional writes on a
key (Cassandra orders the two with different clocks). Exactly one successful
update can flip ``complete``, so a completion is reported once, by the node
whose update made it.

The flip is durable together with its announcement: before the update that
completes a batch, a completion record (``b/c/<batch>/<nonce>``) is stored,
so a crash right after the flip leaves a record for the relay
(:mod:`~dynaq.services.batches.relay`), and the header keeps
``announced = false`` until every listener has had the completion.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.errors import BatchNotFound, DynaqError, StorageError, WrongBatchMode
from dynaq.metrics import Metrics
from dynaq.services.batches.records import BatchHeader, Completion, encode_completion
from dynaq.storage.base import Store

log = logging.getLogger(__name__)

JSON_SAFE_IDS = 2**53 - 1
CAS_TRIES = 64
"""Conditional-put attempts before a record that keeps changing is reported as
a storage error (each lost attempt means another writer made progress)."""

Change = Callable[[BatchHeader], Completion | None]
"""Mutates a header; returns a completion if it made the batch complete; may
raise to refuse the update. A change that leaves the header as it was writes nothing."""

AsyncChange = Callable[[BatchHeader], Awaitable[Completion | None]]
"""A :data:`Change` that reads other records (after the header was read) first."""

CompletionWatch = Callable[[Completion, bytes], None]
"""Takes a completion whose flip failed with an unknown outcome, and its record, to
check later whether the flip applied."""

CompletionSink = Callable[[Completion, bytes], Awaitable[None]]
"""Takes a completion and its stored record once the flip is durable; never raises
a :class:`~dynaq.errors.DynaqError` (it owns retrying)."""


class _Refused(Exception):
    """A conditional removal whose condition no longer holds."""


class Headers:
    """Reads, creates, updates and removes batch headers; hands completions on."""

    def __init__(self, store: Store, clock: Clock, metrics: Metrics) -> None:
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self.on_complete: CompletionSink | None = None
        self.on_uncertain: CompletionWatch | None = None
        self.locks: dict[int, asyncio.Lock] = {}
        self.lock_users: dict[int, int] = {}

    async def read_any(self, batch_id: int) -> tuple[BatchHeader, int] | None:
        """The header and its version, also while it is being removed; ``None`` if absent."""
        item = await self._store.get(keys.batch_header(batch_id))
        if item is None:
            return None
        return BatchHeader.decode(item.value), item.version

    async def read(self, batch_id: int) -> tuple[BatchHeader, int]:
        """The header and its version; :class:`BatchNotFound` if there is none (or it
        is being removed)."""
        got = await self.read_any(batch_id)
        if got is None or got[0].removing:
            raise BatchNotFound(f"batch {batch_id} does not exist")
        return got

    async def read_many(self, batch_ids: Iterable[int]) -> list[BatchHeader | None]:
        """The headers of ``batch_ids`` in one read, ``None`` where absent (or being removed)."""
        items = await self._store.get_many([keys.batch_header(b) for b in batch_ids])
        headers = [None if i is None else BatchHeader.decode(i.value) for i in items]
        return [None if h is None or h.removing else h for h in headers]

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

    async def update(
        self, batch_id: int, change: Change, *, touch: bool = True
    ) -> tuple[BatchHeader, Completion | None]:
        """Apply ``change`` to the header with a version check, retrying on races.

        ``change`` mutates the header and returns a completion when it made the
        batch complete; it may raise to refuse. Exactly one successful update
        can flip ``complete``, so a completion is reported once. ``touch``
        stamps ``updated_ms`` (activity the reaper respects).
        """

        async def run(h: BatchHeader) -> Completion | None:
            return change(h)

        return await self.update_async(batch_id, run, touch=touch)

    async def update_async(
        self, batch_id: int, change: AsyncChange, *, touch: bool = True
    ) -> tuple[BatchHeader, Completion | None]:
        """:meth:`update` with a change that may read other records after the header."""
        lock = self.locks.setdefault(batch_id, asyncio.Lock())
        self.lock_users[batch_id] = self.lock_users.get(batch_id, 0) + 1
        try:
            async with lock:  # no conflicts among this node's own updates
                header, done, record = await self._update_locked(batch_id, change, touch)
        finally:
            # Forget the lock with its last user: one per live batch, not per batch ever seen.
            self.lock_users[batch_id] -= 1
            if not self.lock_users[batch_id]:
                del self.lock_users[batch_id]
                self.locks.pop(batch_id, None)
        if done is not None and record is not None:
            self._metrics.incr("batches.completed.count")
            log.info(
                "batch completed", extra={"batch_id": done.batch_id, "user_key": done.user_key}
            )
            if self.on_complete is not None:
                await self.on_complete(done, record)
        return header, done

    async def _update_locked(
        self, batch_id: int, change: AsyncChange, touch: bool
    ) -> tuple[BatchHeader, Completion | None, bytes | None]:
        key = keys.batch_header(batch_id)
        for _ in range(CAS_TRIES):
            header, version = await self.read(batch_id)
            before = header.encode()
            done = await change(header)
            if done is None and header.encode() == before:
                return header, None, None  # nothing changed: nothing to write
            now = self._clock.wall_ms()
            if touch:
                header.updated_ms = now
            record: bytes | None = None
            if done is not None:
                header.completed_ms = done.completed_ms
                header.announced = False
                # Stored before the flip: if this update applies and the node dies
                # before the listeners had it, the relay still finds the completion.
                record = keys.batch_completion(batch_id, secrets.token_bytes(16))
                await self._store.put_if_absent(record, encode_completion(done, now))
            try:
                applied = await self._store.put_if_version(key, header.encode(), version)
            except DynaqError:
                if record is not None and done is not None and self.on_uncertain is not None:
                    # The flip may have applied (a timeout is not a refusal), and the
                    # caller's retry would find the batch complete and report nothing:
                    # the relay checks the header soon and delivers if it did.
                    self.on_uncertain(done, record)
                raise
            if applied is not None:
                return header, done, record
            if record is not None:
                await self.discard_record(record)
        raise StorageError(f"batch {batch_id}: header kept changing under concurrent updates")

    async def discard_record(self, record: bytes) -> None:
        """Delete a completion record whose update did not apply (best effort: the
        relay removes what is left once it sees the batch is not complete)."""
        try:
            await self._store.delete(record)
        except DynaqError:
            log.warning("could not remove a stale batch completion record")

    def complete_if_done(self, batch_id: int, h: BatchHeader) -> Completion | None:
        """Mark ``h`` complete if it is closed, nothing is pending and no add is in
        flight (for a :data:`Change`)."""
        if h.closed and not h.complete and h.pending <= 0 and not h.adds:
            h.complete = True
            return Completion(batch_id, h.user_key, self._clock.wall_ms())
        return None

    async def mark_removing(
        self, batch_id: int, still: Callable[[BatchHeader], bool] = lambda h: True
    ) -> BatchHeader | None:
        """Mark the batch as being removed if ``still(header)`` holds at the version
        the mark replaces; return the header, or ``None`` (absent, or refused).

        From the mark on, the batch reads as absent and takes no update, so a
        check made before removing cannot be overtaken by a write (an add, a
        close) that the removal would then destroy.
        """

        def change(h: BatchHeader) -> Completion | None:
            if not still(h):
                raise _Refused
            h.removing = True
            return None

        try:
            header, _ = await self.update(batch_id, change, touch=False)
        except (BatchNotFound, _Refused):
            return None
        return header

    async def remove(self, batch_id: int) -> None:
        """Delete a batch marked ``removing``: its blocks, then its header (last, so a
        removal cut short leaves the marked header, which the reaper finishes)."""
        start, end = keys.batch_blocks(batch_id)
        while True:
            blocks = await self._store.scan(start, end, 256)
            if not blocks:
                break
            await asyncio.gather(*(self._store.delete(k) for k, _ in blocks))
        await self._store.delete(keys.batch_published(batch_id))
        await self._store.delete_range(*keys.batch_failed_items(batch_id))
        await self._store.delete(keys.batch_header(batch_id))
