"""Batch-completion tracking (Carlyle's design): know when a fan-out of N items is done.

A producer opens a batch, adds items in blocks (each block is ``{id, upto}``;
the client expands it into item ids ``batchId:id:0 .. upto-1``), closes the
batch, and consumers ack items. The batch is **complete** when it is closed
and every item is acked; the one call that makes it so (the close, or the
last ack) reports it, exactly once, and a completion event goes to the
configured topic.

**Exact mode** keeps each block as a bitfield (1 = not yet acked) in one
store record, and the batch header counts the blocks that still have a bit
set. Acking clears bits with a conditional put on the block (version check),
so concurrent acks from many nodes never lose a clear; a block whose last
bit is cleared decrements the header's count with a conditional put too, and
the conditional put that takes a closed batch's count to zero is the one
completion. Acking an item twice changes nothing.

On one node, concurrent ack requests for a batch are **combined**: one task
per batch reads every block the waiting requests touch in one read, applies
all their clears, and writes each changed block once (the embedded store
group-commits those puts together). Conflicts with other nodes are retried
block by block.

**Estimated mode** keeps one counter (incr by N, decr by N): cheap, but an
item acked twice is counted twice, so a batch can complete early.

Storage never mixes plain and conditional writes on a key (Cassandra orders
the two with different clocks): headers and blocks are written only with
``put_if_absent``/``put_if_version`` and removed with ``delete``.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import uuid
import zlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.batch_items import ItemRef
from dynaq.core.leases import CasLease
from dynaq.core.membership import MembershipView
from dynaq.errors import (
    BatchClosed,
    BatchNotFound,
    DynaqError,
    InvalidInput,
    StorageError,
    WrongBatchMode,
)
from dynaq.metrics import Metrics
from dynaq.storage.base import Item, Store
from dynaq.tasks import cancel_and_wait

log = logging.getLogger(__name__)

EXACT = "exact"
ESTIMATED = "estimated"

BLOCK_ITEMS = 4096
"""Items per stored block: a 512-byte bitfield, small enough that concurrent
acks of one block rarely conflict, large enough that 1M items take 245 records."""

JSON_SAFE_IDS = 2**53 - 1
_CAS_TRIES = 64
_REAPER = "batches-reaper"


@dataclass(frozen=True)
class Completion:
    """A batch that just became complete."""

    batch_id: int
    user_key: str | None
    completed_ms: int


@dataclass
class Header:
    """A batch's header record."""

    mode: str
    user_key: str | None
    closed: bool = False
    complete: bool = False
    pending: int = 0
    """Exact: blocks with a bit still set. Estimated: the counter."""
    items: int = 0
    created_ms: int = 0
    updated_ms: int = 0
    completed_ms: int = 0

    def encode(self) -> bytes:
        return bytes(
            msgpack.packb(
                [
                    self.mode,
                    self.user_key,
                    self.closed,
                    self.complete,
                    self.pending,
                    self.items,
                    self.created_ms,
                    self.updated_ms,
                    self.completed_ms,
                ]
            )
        )

    @classmethod
    def decode(cls, raw: bytes) -> Header:
        try:
            return cls(*msgpack.unpackb(raw))
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise StorageError(f"corrupt batch header: {exc}") from exc

    def to_json(self, batch_id: int) -> dict[str, Any]:
        return {
            "batchId": batch_id,
            "userKey": self.user_key,
            "mode": self.mode,
            "isClosed": self.closed,
            "isComplete": self.complete,
            "items": self.items,
            "pending": self.pending,
            "createdAt": self.created_ms,
            "updatedAt": self.updated_ms,
            "completedAt": self.completed_ms or None,
        }


def _encode_block(upto: int, bits: int) -> bytes:
    return bytes(msgpack.packb([upto, bits.to_bytes((upto + 7) // 8, "little")]))


def _decode_block(raw: bytes) -> tuple[int, int]:
    try:
        upto, bits = msgpack.unpackb(raw)
        return int(upto), int.from_bytes(bits, "little")
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise StorageError(f"corrupt batch block: {exc}") from exc


@dataclass
class _AckRequest:
    refs: list[ItemRef]
    future: asyncio.Future[list[Completion]]


@dataclass
class _Combiner:
    waiting: list[_AckRequest] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


@dataclass
class _Block:
    key: bytes
    version: int
    upto: int
    bits: int


CompletionListener = Callable[[Completion], Awaitable[None]]


class BatchService:
    """Exact and estimated batch tracking on the storage contract.

    ``max_items`` caps the items one request may add (and the estimated
    counter's steps). Completion listeners (the completion-topic publisher)
    are called once per completed batch, on the node whose call completed it.
    """

    def __init__(
        self,
        store: Store,
        clock: Clock,
        view: MembershipView,
        metrics: Metrics,
        *,
        max_items: int = 1_000_000,
        open_max_age_s: float = 7200.0,
        closed_max_age_s: float = 604_800.0,
        reap_interval_s: float = 60.0,
        reap_batch: int = 1000,
    ) -> None:
        self._store = store
        self._clock = clock
        self._view = view
        self._metrics = metrics
        self.max_items = max_items
        self.open_max_age_s = open_max_age_s
        self.closed_max_age_s = closed_max_age_s
        self.reap_interval_s = reap_interval_s
        self.reap_batch = reap_batch
        self._combiners: dict[int, _Combiner] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._lock_users: dict[int, int] = {}
        self._listeners: list[CompletionListener] = []
        self._reaper: asyncio.Task[None] | None = None
        self._reap_cursor = 0
        self._reaper_lane = zlib.crc32(_REAPER.encode()) % 1024
        self._lease: CasLease | None = None

    def on_completion(self, listener: CompletionListener) -> None:
        """Call ``listener`` for every batch this node completes."""
        self._listeners.append(listener)

    # lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        if self.reap_interval_s > 0 and self._reaper is None:
            self._reaper = asyncio.create_task(self._reap_loop(), name="batch-reaper")

    async def stop(self) -> None:
        await cancel_and_wait(self._reaper)
        self._reaper = None
        for c in list(self._combiners.values()):
            if c.task is not None:
                await asyncio.gather(c.task, return_exceptions=True)

    # headers -------------------------------------------------------------

    async def _header(self, batch_id: int) -> tuple[Header, int]:
        item = await self._store.get(keys.batch_header(batch_id))
        if item is None:
            raise BatchNotFound(f"batch {batch_id} does not exist")
        return Header.decode(item.value), item.version

    async def get(self, batch_id: int, mode: str | None = None) -> Header:
        header, _ = await self._header(batch_id)
        if mode is not None and header.mode != mode:
            raise WrongBatchMode(f"batch {batch_id} is an {header.mode} batch")
        return header

    async def _update(
        self, batch_id: int, change: Callable[[Header], Completion | None]
    ) -> tuple[Header, Completion | None]:
        """Apply ``change`` to the header with a version check, retrying on races.

        ``change`` mutates the header and returns a completion when it made the
        batch complete; it may raise to refuse. Exactly one successful update
        can flip ``complete``, so a completion is reported once.
        """
        lock = self._locks.setdefault(batch_id, asyncio.Lock())
        self._lock_users[batch_id] = self._lock_users.get(batch_id, 0) + 1
        try:
            async with lock:  # no conflicts among this node's own updates
                return await self._update_locked(batch_id, change)
        finally:
            # Forget the lock with its last user: one per live batch, not per batch ever seen.
            self._lock_users[batch_id] -= 1
            if not self._lock_users[batch_id]:
                del self._lock_users[batch_id]
                self._locks.pop(batch_id, None)

    async def _update_locked(
        self, batch_id: int, change: Callable[[Header], Completion | None]
    ) -> tuple[Header, Completion | None]:
        for _ in range(_CAS_TRIES):
            header, version = await self._header(batch_id)
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

    def _complete_if_done(self, batch_id: int, h: Header) -> Completion | None:
        if h.closed and not h.complete and h.pending <= 0:
            h.complete = True
            return Completion(batch_id, h.user_key, self._clock.wall_ms())
        return None

    async def _completed(self, done: Completion) -> None:
        self._metrics.incr("batches.completed.count")
        log.info("batch completed", extra={"batch_id": done.batch_id, "user_key": done.user_key})
        for listener in self._listeners:
            try:
                await listener(done)
            except DynaqError:
                log.exception("completion listener failed", extra={"batch_id": done.batch_id})

    # open / close / delete (both modes) -----------------------------------

    async def open(self, mode: str, user_key: str | None) -> int:
        """Create a batch; return its id."""
        if user_key is not None and (not isinstance(user_key, str) or len(user_key) > 1024):
            raise InvalidInput("userKey must be a string of at most 1024 characters")
        now = self._clock.wall_ms()
        header = Header(mode, user_key, created_ms=now, updated_ms=now)
        for _ in range(8):
            # Below 2^53: Carlyle's clients read batch ids as JSON numbers.
            batch_id = secrets.randbelow(JSON_SAFE_IDS) + 1
            if await self._store.put_if_absent(keys.batch_header(batch_id), header.encode()):
                self._metrics.incr(f"batches.{mode}.opened.count")
                return batch_id
        raise StorageError("could not draw an unused batch id")

    async def close(self, batch_id: int, mode: str) -> bool:
        """Close the batch; return whether it is complete (now or already)."""

        def change(h: Header) -> Completion | None:
            if h.mode != mode:
                raise WrongBatchMode(f"batch {batch_id} is an {h.mode} batch")
            h.closed = True
            return self._complete_if_done(batch_id, h)

        header, _ = await self._update(batch_id, change)
        return header.complete

    async def delete(self, batch_id: int, mode: str | None = None) -> int:
        """Delete a batch and its blocks; return how many items it held."""
        header, _ = await self._header(batch_id)
        if mode is not None and header.mode != mode:
            raise WrongBatchMode(f"batch {batch_id} is an {header.mode} batch")
        await self._remove(batch_id)
        return header.items

    async def _remove(self, batch_id: int) -> None:
        start, end = keys.batch_blocks(batch_id)
        while True:
            blocks = await self._store.scan(start, end, 256)
            if not blocks:
                break
            await asyncio.gather(*(self._store.delete(k) for k, _ in blocks))
        await self._store.delete(keys.batch_header(batch_id))

    # exact: items --------------------------------------------------------

    async def add_items(self, batch_id: int, count: int) -> list[tuple[uuid.UUID, int]]:
        """Add ``count`` items to an open exact batch; return its blocks ``(id, upto)``."""
        if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
            raise InvalidInput("items must be a positive integer")
        if count > self.max_items:
            raise InvalidInput(f"at most {self.max_items} items per request, got {count}")
        sizes = [BLOCK_ITEMS] * (count // BLOCK_ITEMS)
        if count % BLOCK_ITEMS:
            sizes.append(count % BLOCK_ITEMS)
        blocks = [(uuid.uuid4(), n) for n in sizes]

        def change(h: Header) -> Completion | None:
            if h.mode != EXACT:
                raise WrongBatchMode(f"batch {batch_id} is an {h.mode} batch")
            if h.closed:
                raise BatchClosed(f"batch {batch_id} is closed: no items can be added")
            h.pending += len(blocks)
            h.items += count
            return None

        # Count the blocks first: a block that exists is always counted, so an
        # ack can never take the count below what is really outstanding.
        await self._update(batch_id, change)
        block_keys = [keys.batch_block(batch_id, b.bytes) for b, _ in blocks]
        try:
            await asyncio.gather(
                *(
                    self._store.put_if_absent(k, _encode_block(n, (1 << n) - 1))
                    for k, (_, n) in zip(block_keys, blocks, strict=True)
                )
            )
        except DynaqError:
            await self._undo_add(batch_id, block_keys, count)
            raise
        self._metrics.incr("batches.items.added.count", count)
        return [(b, n) for b, n in blocks]

    async def _undo_add(self, batch_id: int, block_keys: list[bytes], count: int) -> None:
        """A failed add: remove its blocks and uncount them, so the batch can still complete."""

        def change(h: Header) -> Completion | None:
            h.pending -= len(block_keys)
            h.items -= count
            return self._complete_if_done(batch_id, h)

        try:
            await asyncio.gather(*(self._store.delete(k) for k in block_keys))
            await self._update(batch_id, change)
        except DynaqError:
            log.exception("could not undo a failed add; batch %s may never complete", batch_id)

    # exact: acks ---------------------------------------------------------

    async def ack(self, refs: Sequence[ItemRef]) -> list[Completion]:
        """Ack items (idempotent); return the batches this call completed."""
        by_batch: dict[int, list[ItemRef]] = {}
        for r in refs:
            by_batch.setdefault(r.batch_id, []).append(r)
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[list[Completion]]] = []
        for batch_id, batch_refs in by_batch.items():
            c = self._combiners.setdefault(batch_id, _Combiner())
            fut: asyncio.Future[list[Completion]] = loop.create_future()
            c.waiting.append(_AckRequest(batch_refs, fut))
            futures.append(fut)
            if c.task is None:
                c.task = asyncio.create_task(self._combine(batch_id, c), name="batch-acks")
        results = await asyncio.gather(*futures, return_exceptions=True)
        out: list[Completion] = []
        for result in results:
            if isinstance(result, BaseException):
                raise result
            out.extend(result)
        self._metrics.incr("batches.items.acked.count", len(refs))
        return out

    async def _combine(self, batch_id: int, c: _Combiner) -> None:
        try:
            while c.waiting:
                requests, c.waiting = c.waiting, []
                try:
                    await self._ack_round(batch_id, requests)
                except BaseException as exc:
                    for r in requests:
                        if not r.future.done():
                            r.future.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
        finally:
            c.task = None
            if not c.waiting:
                self._combiners.pop(batch_id, None)

    async def _ack_round(self, batch_id: int, requests: list[_AckRequest]) -> None:
        wanted = list(dict.fromkeys(r.block for req in requests for r in req.refs))
        blocks = await self._read_blocks(batch_id, wanted)
        valid: list[_AckRequest] = []
        for req in requests:
            error = self._check(batch_id, req.refs, blocks)
            if error is not None:
                req.future.set_exception(error)
            else:
                valid.append(req)
        # Each block's clears, applied until the conditional put wins.
        clears: dict[uuid.UUID, int] = {}
        for req in valid:
            for r in req.refs:
                clears[r.block] = clears.get(r.block, 0) | (1 << r.index)
        emptied: set[uuid.UUID] = set()
        todo = dict(clears)
        for _ in range(_CAS_TRIES):
            writes: list[tuple[uuid.UUID, _Block, int]] = []
            for block_id, mask in todo.items():
                b = blocks[block_id]
                new = b.bits & ~mask
                if new != b.bits:
                    writes.append((block_id, b, new))
            if not writes:
                break
            versions = await asyncio.gather(
                *(
                    self._store.put_if_version(b.key, _encode_block(b.upto, new), b.version)
                    for _, b, new in writes
                )
            )
            lost: list[uuid.UUID] = []
            for (block_id, b, new), v in zip(writes, versions, strict=True):
                if v is None:
                    lost.append(block_id)
                    continue
                if b.bits and not new:
                    emptied.add(block_id)
                b.bits, b.version = new, v
            if not lost:
                break
            blocks.update(await self._read_blocks(batch_id, lost))
            todo = {block_id: clears[block_id] for block_id in lost}
        else:
            raise StorageError(f"batch {batch_id}: blocks kept changing under concurrent acks")
        done: Completion | None = None
        if emptied:

            def change(h: Header) -> Completion | None:
                h.pending -= len(emptied)
                return self._complete_if_done(batch_id, h)

            _, done = await self._update(batch_id, change)
        # The completion goes to the first request that emptied a block.
        for req in valid:
            mine: list[Completion] = []
            if done is not None and any(r.block in emptied for r in req.refs):
                mine, done = [done], None
            req.future.set_result(mine)

    async def _read_blocks(
        self, batch_id: int, ids: Iterable[uuid.UUID]
    ) -> dict[uuid.UUID, _Block]:
        ids = list(ids)
        block_keys = [keys.batch_block(batch_id, b.bytes) for b in ids]
        items: list[Item | None] = await self._store.get_many(block_keys)
        out: dict[uuid.UUID, _Block] = {}
        for block_id, key, item in zip(ids, block_keys, items, strict=True):
            if item is not None:
                upto, bits = _decode_block(item.value)
                out[block_id] = _Block(key, item.version, upto, bits)
        return out

    @staticmethod
    def _check(
        batch_id: int, refs: Sequence[ItemRef], blocks: dict[uuid.UUID, _Block]
    ) -> DynaqError | None:
        for r in refs:
            b = blocks.get(r.block)
            if b is None:
                return BatchNotFound(f"batch {batch_id} has no block {r.block}")
            if r.index >= b.upto:
                return InvalidInput(
                    f"item index {r.index} is beyond block {r.block}'s upto {b.upto}"
                )
        return None

    # estimated -----------------------------------------------------------

    async def incr(self, batch_id: int, by: int) -> Header:
        """Add ``by`` expected items to an open estimated batch."""
        self._check_step(by)

        def change(h: Header) -> Completion | None:
            if h.mode != ESTIMATED:
                raise WrongBatchMode(f"batch {batch_id} is an {h.mode} batch")
            if h.closed:
                raise BatchClosed(f"batch {batch_id} is closed: its count cannot grow")
            h.pending += by
            h.items += by
            return None

        header, _ = await self._update(batch_id, change)
        return header

    async def decr(self, acks: Sequence[tuple[int, int]]) -> list[Completion]:
        """Subtract every ``(batch_id, by)``; return the batches this call completed."""
        for _, by in acks:
            self._check_step(by)
        out: list[Completion] = []
        for batch_id, by in acks:

            def change(h: Header, batch_id: int = batch_id, by: int = by) -> Completion | None:
                if h.mode != ESTIMATED:
                    raise WrongBatchMode(f"batch {batch_id} is an {h.mode} batch")
                h.pending -= by
                return self._complete_if_done(batch_id, h)

            _, done = await self._update(batch_id, change)
            if done is not None:
                out.append(done)
        return out

    def _check_step(self, by: int) -> None:
        if isinstance(by, bool) or not isinstance(by, int) or by <= 0:
            raise InvalidInput("by must be a positive integer")
        if by > self.max_items:
            raise InvalidInput(f"by must be at most {self.max_items}")

    # cleanup -------------------------------------------------------------

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
                h = Header.decode(item.value)
                if h.closed == closed and h.updated_ms < since_ms:
                    await self._remove(keys.batch_id_of_header(key))
                    removed += 1
                    items += h.items
                    self._metrics.incr("batches.reaped.count")

    def is_reaper(self) -> bool:
        """Whether the ring makes this node the one reaper."""
        return self._view.owner_of_lane(self._reaper_lane).name == self._view.me.name

    async def _take_lease(self) -> bool:
        """Fence the reaper in the store: two nodes that disagree about the ring
        cannot both hold a lease that has not expired."""
        name = self._view.me.name  # read each round: the lease follows this node's ring name
        if self._lease is None or self._lease.holder != name:
            self._lease = CasLease(
                self._store, keys.BATCH_REAPER_LEASE, name, self._clock, self.reap_interval_s * 3
            )
        return await self._lease.acquire()

    async def reap_once(self) -> tuple[int, int]:
        """One bounded reaper round: at most ``reap_batch`` headers from a cursor.

        Open batches idle for ``open_max_age_s`` and closed ones (complete or
        not) idle for ``closed_max_age_s`` are deleted with their blocks,
        with or without items (Carlyle's reaper skipped batches without items).
        """
        now = self._clock.wall_ms()
        open_before = now - int(self.open_max_age_s * 1000)
        closed_before = now - int(self.closed_max_age_s * 1000)
        start = keys.batch_header(self._reap_cursor)
        end = keys.BATCH_HEADER + b"\xff" * 9
        rows = await self._store.scan(start, end, self.reap_batch)
        self._reap_cursor = (
            0 if len(rows) < self.reap_batch else keys.batch_id_of_header(rows[-1][0]) + 1
        )
        removed = items = 0
        for key, raw in rows:
            h = Header.decode(raw)
            if h.updated_ms < (closed_before if h.closed else open_before):
                await self._remove(keys.batch_id_of_header(key))
                removed += 1
                items += h.items
        if removed:
            self._metrics.incr("batches.reaped.count", removed)
            log.info("reaped batches", extra={"batches": removed, "items": items})
        return removed, items

    async def _reap_loop(self) -> None:
        while True:
            await asyncio.sleep(self.reap_interval_s)
            try:
                if self.is_reaper() and await self._take_lease():
                    await self.reap_once()
            except DynaqError:
                log.exception("batch reaper round failed")
