"""Exact mode's multi-record steps, made idempotent and recoverable.

**Counting an emptied block.** An ack that clears a block's last bit changes
two records: the block and the header's ``pending``. They cannot be written
atomically (two conditional puts), so the count goes in steps, each safe to
repeat and to run concurrently from several nodes:

1. the block's last bit clears (``bits == 0``, ``retired`` false): "emptied";
2. the header subtracts it from ``pending`` *and* lists it in ``retiring``, in
   one conditional put, only if it is not listed yet and a read of the block
   made after the header read still shows it emptied;
3. the block is marked ``retired``;
4. the header drops it from ``retiring``.

A block is subtracted at most once: step 2 skips a listed block, and a block
leaves the list (4) only after it is marked retired (3), which step 2's block
read (made after the header read its version) would see. It is subtracted at
least once: until step 3 it reads as emptied, and whoever finds it so (a
retried ack, the reaper following a repair marker) runs the steps again.

**Adding items.** An add is registered in the header (an :class:`AddIntent`),
then writes its blocks, then, in one conditional put, counts them and drops the
intent. A batch with an intent never completes. An add that fails removes its
intent and then its blocks; an add interrupted by a crash or a cancellation
is undone the same way by the reaper once its intent is older than the grace
period. Counting requires the intent, and removing it is atomic, so an add is
either counted once or not at all. If the count's outcome is unknown (a store
timeout) the add looks its intent up: gone means counted.

**Repair markers.** Both operations store a marker (``b/r/<batch>/<nonce>``)
before their first step and delete it after their last, so the reaper finds
what a crash interrupted by scanning markers, not every batch.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import uuid
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.errors import DynaqError, StorageError
from dynaq.services.batches.headers import CAS_TRIES, Headers
from dynaq.services.batches.records import (
    AddIntent,
    BatchHeader,
    Block,
    Completion,
    encode_marker,
)
from dynaq.storage.base import Item, Store

log = logging.getLogger(__name__)


@dataclass
class StoredBlock:
    """A block as read, with what a conditional put of it needs."""

    key: bytes
    version: int
    block: Block


class Settler:
    """Counts emptied blocks exactly once, undoes interrupted adds, keeps repair markers."""

    def __init__(self, store: Store, clock: Clock, headers: Headers) -> None:
        self._store = store
        self._clock = clock
        self._headers = headers

    # markers ---------------------------------------------------------------

    async def mark(self, batch_id: int, blocks: Iterable[uuid.UUID]) -> bytes:
        """Store a repair marker for an operation about to start; return its key."""
        key = keys.batch_repair(batch_id, secrets.token_bytes(16))
        await self._store.put_if_absent(key, encode_marker(self._clock.wall_ms(), blocks))
        return key

    async def unmark(self, marker: bytes) -> None:
        """Delete a finished operation's marker (best effort: a marker left behind
        costs the reaper one idempotent repair)."""
        try:
            await self._store.delete(marker)
        except DynaqError:
            log.warning("could not remove a batch repair marker; the reaper will")

    # blocks ----------------------------------------------------------------

    async def read_blocks(
        self, batch_id: int, ids: Iterable[uuid.UUID]
    ) -> dict[uuid.UUID, StoredBlock]:
        """The stored blocks among ``ids`` (absent ones are left out)."""
        ids = list(ids)
        block_keys = [keys.batch_block(batch_id, b.bytes) for b in ids]
        items: list[Item | None] = await self._store.get_many(block_keys)
        return {
            block_id: StoredBlock(key, item.version, Block.decode(item.value))
            for block_id, key, item in zip(ids, block_keys, items, strict=True)
            if item is not None
        }

    # counting emptied blocks ----------------------------------------------

    async def settle(
        self, batch_id: int, ids: Collection[uuid.UUID]
    ) -> tuple[Completion | None, bool]:
        """Count every emptied block among ``ids`` once (steps 2-4 above).

        Returns the completion the count made (if it completed the batch) and
        whether every step finished; a step left undone (the store failed after
        the count) is finished by a later ack or the reaper, so a failure after
        the count is logged, not raised.
        """
        wanted = set(ids)

        async def count(h: BatchHeader) -> Completion | None:
            fresh = [b for b in wanted if b not in h.retiring]
            if fresh:
                # Read after the header: a block retired since it was found emptied
                # is already counted (it left `retiring` only after it was retired).
                blocks = await self.read_blocks(batch_id, fresh)
                fresh = [b for b in fresh if b in blocks and blocks[b].block.emptied]
                h.pending -= len(fresh)
                h.retiring.extend(fresh)
            return self._headers.complete_if_done(batch_id, h)

        header, done = await self._headers.update_async(batch_id, count)
        mine = [b for b in header.retiring if b in wanted]
        try:
            await self._retire(batch_id, mine)
        except DynaqError:
            log.warning("batch %s: emptied blocks counted but not yet retired", batch_id)
            return done, False
        return done, True

    async def _retire(self, batch_id: int, ids: list[uuid.UUID]) -> None:
        if not ids:
            return
        todo = await self.read_blocks(batch_id, ids)
        for _ in range(CAS_TRIES):
            writes = [(b, s) for b, s in todo.items() if s.block.bits == 0 and not s.block.retired]
            if not writes:
                break
            results = await asyncio.gather(
                *(
                    self._store.put_if_version(
                        s.key,
                        Block(s.block.upto, 0, True, s.block.last_ack_ms).encode(),
                        s.version,
                    )
                    for _, s in writes
                )
            )
            lost = [b for (b, _), v in zip(writes, results, strict=True) if v is None]
            todo = await self.read_blocks(batch_id, lost) if lost else {}
        else:
            raise StorageError(f"batch {batch_id}: blocks kept changing while being retired")
        gone = set(ids)

        def forget(h: BatchHeader) -> Completion | None:
            h.retiring = [b for b in h.retiring if b not in gone]
            return None

        await self._headers.update(batch_id, forget, touch=False)

    # adds --------------------------------------------------------------------

    async def abort_add(self, batch_id: int, intent: AddIntent) -> bool:
        """Undo an add that was not counted: drop its intent, then delete its blocks.

        Returns ``False`` if the intent was gone already (the add was counted, or
        undone before); :class:`~dynaq.errors.BatchNotFound` if the batch is.
        Dropping the intent may complete a closed batch.
        """
        dropped = False

        def drop(h: BatchHeader) -> Completion | None:
            nonlocal dropped
            left = [a for a in h.adds if a.add_id != intent.add_id]
            dropped = len(left) < len(h.adds)
            h.adds = left
            return self._headers.complete_if_done(batch_id, h)

        await self._headers.update(batch_id, drop)
        if dropped:
            # Nobody was given these ids; a block a crash leaves here is harmless
            # (never counted) and goes with the batch.
            block_keys = [keys.batch_block(batch_id, b.bytes) for b, _ in intent.blocks()]
            try:
                await asyncio.gather(*(self._store.delete(k) for k in block_keys))
            except DynaqError:
                log.warning("batch %s: blocks of an undone add left behind", batch_id)
        return dropped

    async def withdraw(self, batch_id: int, intent: AddIntent) -> None:
        """Count out a counted add whose ids reached nobody (its caller was cancelled
        after the count applied): its blocks are emptied as if acked, and counted
        once like any emptied block. ``items`` keeps them (it counts what was added)."""
        ids = [b for b, _ in intent.blocks()]
        marker = await self.mark(batch_id, ids)
        now = self._clock.wall_ms()
        todo = await self.read_blocks(batch_id, ids)
        for _ in range(CAS_TRIES):
            writes = [(b, s) for b, s in todo.items() if s.block.bits]
            if not writes:
                break
            results = await asyncio.gather(
                *(
                    self._store.put_if_version(
                        s.key, Block(s.block.upto, 0, False, now).encode(), s.version
                    )
                    for _, s in writes
                )
            )
            lost = [b for (b, _), v in zip(writes, results, strict=True) if v is None]
            todo = await self.read_blocks(batch_id, lost) if lost else {}
        else:
            raise StorageError(f"batch {batch_id}: blocks kept changing while withdrawn")
        _, finished = await self.settle(batch_id, ids)
        if finished:
            await self.unmark(marker)

    # repair ----------------------------------------------------------------

    async def repair(self, batch_id: int, ids: Iterable[uuid.UUID], stale_before_ms: int) -> bool:
        """Finish what interrupted operations left in a batch: undo adds registered
        before ``stale_before_ms``, count emptied blocks among ``ids`` and finish
        the header's ``retiring`` ones. Returns whether no add is in flight any
        more (a marker may then go: a live add keeps its own)."""
        got = await self._headers.read_any(batch_id)
        if got is None or got[0].removing:
            return True  # gone, or going (the reaper finishes a removal)
        header = got[0]
        for intent in header.adds:
            if intent.started_ms < stale_before_ms:
                await self.abort_add(batch_id, intent)
        _, finished = await self.settle(batch_id, {*ids, *header.retiring})
        after = await self._headers.read_any(batch_id)
        return finished and (after is None or not after[0].adds)
