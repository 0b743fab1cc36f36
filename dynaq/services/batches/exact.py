"""Exact mode: items in bitfield blocks, cleared by conditional puts, acks combined per batch.

Where the package's exact-mode guarantees are kept (see :mod:`dynaq.services.batches`):
a block's clears are retried until its conditional put wins, so concurrent
acks from many nodes never lose one; a block counts in its header from the
add that created it until its last bit clears, exactly once whatever fails in
between (:mod:`~dynaq.services.batches.settle`); acking twice changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.batch_items import ItemRef
from dynaq.errors import (
    BatchClosed,
    BatchNotFound,
    DynaqError,
    InvalidInput,
    StorageError,
    StorageUnavailable,
    WrongBatchMode,
)
from dynaq.metrics import Metrics
from dynaq.services.batches.headers import CAS_TRIES, Headers
from dynaq.services.batches.records import (
    EXACT,
    AddIntent,
    BatchHeader,
    Block,
    Completion,
)
from dynaq.services.batches.settle import Settler, StoredBlock
from dynaq.storage.base import Store

log = logging.getLogger(__name__)


@dataclass
class _Step:
    counting: bool = False
    """The count's conditional put was sent (its outcome may be unknown)."""


class ExactBatches:
    """Adding items to exact batches, and acking them through a :class:`CombinerPool`.

    ``add_deadline_s`` bounds an add: one that has not counted its blocks by
    then undoes itself, so the reaper, which undoes adds registered longer ago
    than its grace period (more than twice this), never undoes one still running.
    """

    def __init__(
        self,
        store: Store,
        headers: Headers,
        settler: Settler,
        clock: Clock,
        metrics: Metrics,
        max_items: int,
        add_deadline_s: float,
    ) -> None:
        self._store = store
        self._headers = headers
        self._settler = settler
        self._clock = clock
        self._metrics = metrics
        self._max_items = max_items
        self._add_deadline_s = add_deadline_s
        self._undoing: set[asyncio.Task[None]] = set()
        self.acks = CombinerPool(store, headers, settler, clock, metrics)

    async def drain(self) -> None:
        """Wait for running acks and for undos of cancelled adds."""
        await self.acks.drain()
        await asyncio.gather(*self._undoing, return_exceptions=True)

    async def add_items(self, batch_id: int, count: int) -> list[tuple[uuid.UUID, int]]:
        """Add ``count`` items to an open exact batch; return its blocks ``(id, upto)``.

        Either the blocks are returned and counted in the batch, or the call
        raises (or is cancelled) and the add is undone: by this call, by a task
        it leaves when cancelled (which also counts out blocks whose count
        applied just before the cancellation), or by the reaper after a crash.
        One case is the caller's, as with any lost response: a node that dies
        after the count applied and before answering leaves blocks nobody was
        told about, which keep the batch from completing.
        """
        # The API has checked that ``count`` is an int; its range is the service's own.
        if count <= 0:
            raise InvalidInput("items must be a positive integer")
        if count > self._max_items:
            raise InvalidInput(f"at most {self._max_items} items per request, got {count}")
        intent = AddIntent(secrets.token_bytes(16), count, self._clock.wall_ms())
        blocks = intent.blocks()
        marker = await self._settler.mark(batch_id, ())
        step = _Step()
        try:
            await self._add(batch_id, intent, blocks, step)
            # Inside the try: a cancellation here still means nobody got the ids.
            await self._settler.unmark(marker)
        except DynaqError:
            try:
                undone = await self._settler.abort_add(batch_id, intent)
            except BatchNotFound:
                undone = True  # the batch is gone: nothing of the add is left to undo
            except DynaqError:
                log.warning("batch %s: a failed add is left for the reaper to undo", batch_id)
                raise
            await self._settler.unmark(marker)
            if step.counting and not undone:
                # The count's outcome was unknown, and its intent is gone: it applied.
                return blocks
            raise
        except asyncio.CancelledError:
            task = asyncio.create_task(
                self._undo(batch_id, intent, marker, step.counting), name="batch-add-undo"
            )
            self._undoing.add(task)
            task.add_done_callback(self._undoing.discard)
            raise
        self._metrics.incr("batches.items.added.count", count)
        return blocks

    async def _add(
        self, batch_id: int, intent: AddIntent, blocks: list[tuple[uuid.UUID, int]], step: _Step
    ) -> None:
        started = self._clock.monotonic()

        def register(h: BatchHeader) -> Completion | None:
            if h.mode != EXACT:
                raise WrongBatchMode(f"batch {batch_id} is an {h.mode} batch")
            if h.closed:
                raise BatchClosed(f"batch {batch_id} is closed: no items can be added")
            h.adds.append(intent)
            return None

        await self._headers.update(batch_id, register)
        await asyncio.gather(
            *(
                self._store.put_if_absent(
                    keys.batch_block(batch_id, b.bytes), Block(n, (1 << n) - 1).encode()
                )
                for b, n in blocks
            )
        )
        if self._clock.monotonic() - started > self._add_deadline_s:
            raise StorageUnavailable(f"adding items to batch {batch_id} took too long; retry")

        def count(h: BatchHeader) -> Completion | None:
            if not any(a.add_id == intent.add_id for a in h.adds):
                step.counting = False  # refused, not unknown
                raise StorageUnavailable(
                    f"adding items to batch {batch_id} was undone while it ran; retry"
                )
            h.adds = [a for a in h.adds if a.add_id != intent.add_id]
            h.pending += len(blocks)
            h.items += intent.count
            return None

        step.counting = True
        await self._headers.update(batch_id, count)

    async def _undo(self, batch_id: int, intent: AddIntent, marker: bytes, counting: bool) -> None:
        try:
            if not await self._settler.abort_add(batch_id, intent) and counting:
                # The count applied, but the caller was cancelled before it learnt
                # the ids: nobody can ack these blocks, so they are counted out.
                await self._settler.withdraw(batch_id, intent)
        except BatchNotFound:
            pass  # the batch is gone, and with it what the add left
        except DynaqError:
            log.warning("batch %s: a cancelled add is left for the reaper to undo", batch_id)
            return
        await self._settler.unmark(marker)


@dataclass
class _AckRequest:
    refs: list[ItemRef]
    future: asyncio.Future[list[Completion]]


@dataclass
class _Combiner:
    waiting: list[_AckRequest] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


class CombinerPool:
    """Exact-mode acks, combined per batch: at most one ack task per batch at a time.

    A combiner exists only while its batch has acks waiting or in flight.
    """

    def __init__(
        self, store: Store, headers: Headers, settler: Settler, clock: Clock, metrics: Metrics
    ) -> None:
        self._store = store
        self._headers = headers
        self._settler = settler
        self._clock = clock
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
        if len(by_batch) > 1:
            # Checked whole before any of it is applied, as a decr is: each batch's
            # acks commit on their own, so one bad id used to fail the request after
            # the other batches' acks had landed, and a completion they caused was
            # answered to nobody. (One batch's acks are checked whole by its round.)
            for batch_id, batch_refs in by_batch.items():
                wanted = list(dict.fromkeys(r.block for r in batch_refs))
                error = self._check(
                    batch_id, batch_refs, await self._settler.read_blocks(batch_id, wanted)
                )
                if error is not None:
                    raise error
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
        blocks = await self._settler.read_blocks(batch_id, wanted)
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
        markers = await self._clear(batch_id, clears, blocks)
        # Every touched block that is empty but not yet counted: emptied by this
        # round, by a concurrent one, or by an ack a failure cut short.
        emptied = {b for b in clears if blocks[b].block.emptied}
        done: Completion | None = None
        finished = True
        if emptied:
            done, finished = await self._settler.settle(batch_id, emptied)
        if finished:
            for marker in markers:
                await self._settler.unmark(marker)
        # The completion goes to the first request that touched a counted block.
        for req in valid:
            mine: list[Completion] = []
            if done is not None and any(r.block in emptied for r in req.refs):
                mine, done = [done], None
            req.future.set_result(mine)

    async def _clear(
        self, batch_id: int, clears: dict[uuid.UUID, int], blocks: dict[uuid.UUID, StoredBlock]
    ) -> list[bytes]:
        """Apply ``clears`` to ``blocks`` until every conditional put won; return the
        repair markers stored before writes that emptied a block."""
        now = self._clock.wall_ms()
        markers: list[bytes] = []
        marked: set[uuid.UUID] = set()
        todo = dict(clears)
        for _ in range(CAS_TRIES):
            writes: list[tuple[uuid.UUID, StoredBlock, int]] = []
            for block_id, mask in todo.items():
                s = blocks.get(block_id)
                if s is None:  # deleted since this round read it
                    raise BatchNotFound(f"batch {batch_id} has no block {block_id}")
                new = s.block.bits & ~mask
                if new != s.block.bits:
                    writes.append((block_id, s, new))
            if not writes:
                break
            emptying = {block_id for block_id, _, new in writes if not new} - marked
            if emptying:
                # Before the write that empties a block: if the count that must
                # follow it never happens, this marker leads the reaper to it.
                markers.append(await self._settler.mark(batch_id, emptying))
                marked |= emptying
            versions = await asyncio.gather(
                *(
                    self._store.put_if_version(
                        s.key, Block(s.block.upto, new, False, now).encode(), s.version
                    )
                    for _, s, new in writes
                )
            )
            lost: list[uuid.UUID] = []
            for (block_id, s, new), v in zip(writes, versions, strict=True):
                if v is None:
                    lost.append(block_id)
                else:
                    s.block, s.version = Block(s.block.upto, new, False, now), v
            if not lost:
                return markers
            for block_id in lost:
                blocks.pop(block_id, None)
            blocks.update(await self._settler.read_blocks(batch_id, lost))
            todo = {block_id: clears[block_id] for block_id in lost}
        else:
            raise StorageError(f"batch {batch_id}: blocks kept changing under concurrent acks")
        return markers

    @staticmethod
    def _check(
        batch_id: int, refs: Sequence[ItemRef], blocks: dict[uuid.UUID, StoredBlock]
    ) -> DynaqError | None:
        for r in refs:
            s = blocks.get(r.block)
            if s is None:
                return BatchNotFound(f"batch {batch_id} has no block {r.block}")
            if r.index >= s.block.upto:
                return InvalidInput(
                    f"item index {r.index} is beyond block {r.block}'s upto {s.block.upto}"
                )
        return None
