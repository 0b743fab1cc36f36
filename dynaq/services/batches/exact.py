"""Exact mode: items in bitfield blocks, cleared by conditional puts, acks combined per batch.

Where the package's exact-mode guarantees are kept (see :mod:`dynaq.services.batches`):
a block's clears are retried until its conditional put wins, so concurrent
acks from many nodes never lose one; a block counts in its header from before
it exists until its last bit clears; acking twice changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from dynaq.core import keys
from dynaq.core.batch_items import ItemRef
from dynaq.errors import (
    BatchClosed,
    BatchNotFound,
    DynaqError,
    InvalidInput,
    StorageError,
    WrongBatchMode,
)
from dynaq.metrics import Metrics
from dynaq.services.batches.headers import CAS_TRIES, Headers
from dynaq.services.batches.records import (
    BLOCK_ITEMS,
    EXACT,
    BatchHeader,
    Completion,
    decode_block,
    encode_block,
)
from dynaq.storage.base import Item, Store

log = logging.getLogger(__name__)


class ExactBatches:
    """Adding items to exact batches, and acking them through a :class:`CombinerPool`."""

    def __init__(self, store: Store, headers: Headers, metrics: Metrics, max_items: int) -> None:
        self._store = store
        self._headers = headers
        self._metrics = metrics
        self._max_items = max_items
        self.acks = CombinerPool(store, headers, metrics)

    async def add_items(self, batch_id: int, count: int) -> list[tuple[uuid.UUID, int]]:
        """Add ``count`` items to an open exact batch; return its blocks ``(id, upto)``."""
        # The API has checked that ``count`` is an int; its range is the service's own.
        if count <= 0:
            raise InvalidInput("items must be a positive integer")
        if count > self._max_items:
            raise InvalidInput(f"at most {self._max_items} items per request, got {count}")
        sizes = [BLOCK_ITEMS] * (count // BLOCK_ITEMS)
        if count % BLOCK_ITEMS:
            sizes.append(count % BLOCK_ITEMS)
        blocks = [(uuid.uuid4(), n) for n in sizes]

        def change(h: BatchHeader) -> Completion | None:
            if h.mode != EXACT:
                raise WrongBatchMode(f"batch {batch_id} is an {h.mode} batch")
            if h.closed:
                raise BatchClosed(f"batch {batch_id} is closed: no items can be added")
            h.pending += len(blocks)
            h.items += count
            return None

        # Count the blocks first: a block that exists is always counted, so an
        # ack can never take the count below what is really outstanding.
        await self._headers.update(batch_id, change)
        block_keys = [keys.batch_block(batch_id, b.bytes) for b, _ in blocks]
        try:
            await asyncio.gather(
                *(
                    self._store.put_if_absent(k, encode_block(n, (1 << n) - 1))
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

        def change(h: BatchHeader) -> Completion | None:
            h.pending -= len(block_keys)
            h.items -= count
            return self._headers.complete_if_done(batch_id, h)

        try:
            await asyncio.gather(*(self._store.delete(k) for k in block_keys))
            await self._headers.update(batch_id, change)
        except DynaqError:
            log.exception("could not undo a failed add; batch %s may never complete", batch_id)


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


class CombinerPool:
    """Exact-mode acks, combined per batch: at most one ack task per batch at a time.

    A combiner exists only while its batch has acks waiting or in flight.
    """

    def __init__(self, store: Store, headers: Headers, metrics: Metrics) -> None:
        self._store = store
        self._headers = headers
        self._metrics = metrics
        self._combiners: dict[int, _Combiner] = {}

    @property
    def active(self) -> Mapping[int, object]:
        """The batches with a combiner right now (empty when this node is idle)."""
        return self._combiners

    async def drain(self) -> None:
        """Wait for every running combiner to finish its waiting requests."""
        for c in list(self._combiners.values()):
            if c.task is not None:
                await asyncio.gather(c.task, return_exceptions=True)

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
        for _ in range(CAS_TRIES):
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
                    self._store.put_if_version(b.key, encode_block(b.upto, new), b.version)
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

            def change(h: BatchHeader) -> Completion | None:
                h.pending -= len(emptied)
                return self._headers.complete_if_done(batch_id, h)

            _, done = await self._headers.update(batch_id, change)
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
                upto, bits = decode_block(item.value)
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
