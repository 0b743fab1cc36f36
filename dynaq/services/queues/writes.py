"""Writing messages: input limits, the dedup guard, id allocation and encoding.

A write is three phases so one storage batch can span several queues (a
topic's fanout): :meth:`Writer.prepare` draws ids and encodes, the caller
writes the ops in one ``write_batch``, and :meth:`Writer.note_written`
accounts for it once durable. :meth:`.Dedup.guard` wraps the first two
when messages carry dedup ids (its lock covering the dedup check, its claim the
write; see :mod:`.dedup`), and :meth:`Writer.run_to_completion` keeps a
dedup'd write going when its caller is cancelled.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.batch_items import BATCH_ITEM_ATTRIBUTE, parse_item_id
from dynaq.core.ids import IdGenerator, group_lane, lane_of, lane_start
from dynaq.core.messages import MAX_ATTRIBUTES, NewMessage, encode
from dynaq.errors import IdClockStalled, InvalidInput, PayloadTooLarge
from dynaq.metrics import Metrics
from dynaq.services.catalog import QueueInfo
from dynaq.services.queues.dedup import Dedup, DedupClaim
from dynaq.services.queues.dedup_lock import DedupFileLock
from dynaq.services.queues.handover import HintRouter
from dynaq.services.queues.state import QueueStates
from dynaq.storage.base import Put, Store

T = TypeVar("T")

MAX_TAG_BYTES = 128
"""Longest message group or dedup id, in UTF-8 bytes."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Input limits, enforced before anything is written."""

    max_message_bytes: int = 256 * 1024
    max_batch: int = 1000
    max_receive_bytes: int = 8 * 1024 * 1024
    """A receive serves messages until their bodies pass this many bytes (at least one)."""


@dataclass(slots=True)
class PreparedWrite:
    """Messages encoded for one queue, ready to go into a storage batch."""

    info: QueueInfo
    ids: list[int]
    """One id per input message (the earlier message's id for a dedup hit)."""
    ops: list[Put]
    written: list[int]
    """Ids of the messages this write actually adds."""
    grouped: list[int] = field(default_factory=list)
    """Those of them that belong to a message group."""
    delayed: int = 0
    """How many more it adds as delayed messages (not visible, not in ``written``)."""
    stored: list[int] = field(default_factory=list)
    """Ids of every message this write stores (visible and delayed), in input order."""


class Writer:
    """Prepares, checks and accounts for message writes into any queue."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        ids: IdGenerator,
        metrics: Metrics,
        states: QueueStates,
        hints: HintRouter,
        limits: Limits,
        dedup_window_s: float,
        *,
        sole_writer: bool = False,
        dedup_lock: DedupFileLock | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self.ids = ids
        self._metrics = metrics
        self._states = states
        self._hints = hints
        self.limits = limits
        self.dedup = Dedup(store, clock, dedup_window_s, dedup_lock)
        self._finishing: set[asyncio.Task[Any]] = set()
        # With no other writer, a group lane read once (since start) stays known:
        # every later id there is this writer's own, drawn above it.
        self._observed: dict[int, set[int]] | None = {} if sole_writer else None
        self.refresh_ids: Callable[[], Awaitable[None]] | None = None
        """Persists a new id high-water mark (the node's :class:`IdFloor`), called when
        drawing ids stalls against the mark."""

    async def run_to_completion(
        self, write: Coroutine[Any, Any, T], messages: Sequence[NewMessage], *, always: bool = False
    ) -> T:
        """Await ``write``; if it carries dedup ids (or ``always``), finish it even when
        the caller is cancelled.

        A cancelled caller (a client timeout) does not cancel a write already
        handed to the store, so the dedup lock must stay held until that write
        has landed: released early, a retry of the same dedup id would check,
        find nothing yet, and store a second copy. Such writes are held here
        until they end, and :meth:`wait_finishing` lets shutdown wait for them
        before the store closes.
        """
        if not always and all(m.dedup_id is None for m in messages):
            return await write
        task = asyncio.ensure_future(write)
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)
        return await asyncio.shield(task)

    async def wait_finishing(self) -> None:
        """Wait for writes whose callers were cancelled (their outcome was theirs)."""
        if self._finishing:
            await asyncio.gather(*self._finishing, return_exceptions=True)

    def check_message(self, msg: NewMessage) -> None:
        """Refuse a message over the size limit (body and attributes count, as SQS
        counts them) or with a group or dedup id outside 1..128 UTF-8 bytes (they
        become part of store keys, which backends bound)."""
        size = len(msg.body)
        if msg.attributes:
            size += sum(len(k.encode()) + len(v.encode()) for k, v in msg.attributes.items())
        if size > self.limits.max_message_bytes:
            raise PayloadTooLarge(
                f"message is {size} bytes with its attributes; the limit is "
                f"{self.limits.max_message_bytes}"
            )
        for name, value in (("group", msg.group), ("dedup_id", msg.dedup_id)):
            if value is not None and not 1 <= len(value.encode()) <= MAX_TAG_BYTES:
                raise InvalidInput(f"{name} must be 1..{MAX_TAG_BYTES} bytes of UTF-8")
        if msg.attributes and (len(msg.attributes) > MAX_ATTRIBUTES or "" in msg.attributes):
            # The APIs refuse these first (naming the member); this holds for every
            # other way in too (the outbox relay's rows, topics, transactions).
            raise InvalidInput(
                f"a message carries at most {MAX_ATTRIBUTES} attributes, none with an empty name"
            )
        if msg.attributes and BATCH_ITEM_ATTRIBUTE in msg.attributes:
            parse_item_id(msg.attributes[BATCH_ITEM_ATTRIBUTE])  # 422 now, not a lost ack later

    def check_batch(self, messages: Sequence[NewMessage]) -> None:
        if len(messages) > self.limits.max_batch:
            raise InvalidInput(
                f"a batch holds at most {self.limits.max_batch} messages, got {len(messages)}"
            )
        for m in messages:
            self.check_message(m)

    def forget(self, number: int) -> None:
        """A queue is gone: drop its per-queue state (no state outlives its queue)."""
        self.dedup.forget(number)
        if self._observed is not None:
            self._observed.pop(number, None)

    async def prepare(
        self, info: QueueInfo, messages: Sequence[NewMessage], claim: DedupClaim | None = None
    ) -> PreparedWrite:
        """Draw ids and encode ``messages`` for ``info`` without writing them.

        A message whose dedup id was seen within the window gets the earlier
        message's id and is not written again; an id held by a write still in
        flight on this node is checked once that write has landed. The dedup
        ids this write adds are registered under ``claim`` (see
        :meth:`.Dedup.guard`). Grouped messages go to their group's lane; the
        others share one lane so the write appends.
        """
        ids: list[int | None] = [None] * len(messages)
        wanted = list(dict.fromkeys(m.dedup_id for m in messages if m.dedup_id is not None))
        now_ms = self._clock.wall_ms()
        seen = await self.dedup.check(info.number, wanted, claim) if wanted else None
        known: dict[str, int] = {} if seen is None else seen.known
        fresh: list[tuple[int, NewMessage]] = []
        for i, m in enumerate(messages):
            if m.dedup_id is not None and m.dedup_id in known:
                ids[i] = known[m.dedup_id]
            else:
                fresh.append((i, m))
                if m.dedup_id is not None:
                    known[m.dedup_id] = -1 - i  # later copies in this batch point here
        groups = [m.group for _, m in fresh if m.group is not None]
        if groups:
            await self._observe_group_lanes(info, groups)
        try:
            self._allocate(fresh, ids)
        except IdClockStalled:
            if self.refresh_ids is None:
                raise
            # Observing a lane can move the id clock past the persisted high-water
            # mark (a peer's clock is ahead): persist a new mark now, then retry once.
            await self.refresh_ids()
            self._allocate(fresh, ids)
        compress = info.settings.compressed_messages
        default_delay = info.settings.delay_s
        ops: list[Put] = []
        written: list[int] = []
        grouped: list[int] = []
        delayed = 0
        stored: list[int] = []
        for i, m in fresh:
            mid = ids[i]
            assert mid is not None
            stored.append(mid)
            delay_s = default_delay if m.delay_s is None else m.delay_s
            if delay_s > 0:
                # Waits under its due time; the slice owner's mover makes it a message
                # (same id) once due. See dynaq.services.queues.delays.
                due_ms = now_ms + math.ceil(delay_s * 1000)
                ops.append(Put(keys.delayed(due_ms, info.number, mid), encode(m, now_ms, compress)))
                delayed += 1
            else:
                ops.append(Put(keys.message(info.number, mid), encode(m, now_ms, compress)))
                written.append(mid)
                if m.group is not None:
                    grouped.append(mid)
            if m.dedup_id is not None:
                assert seen is not None
                ops.append(Put(seen.write_prefix + m.dedup_id.encode(), seen.record(mid)))
                if claim is not None:
                    claim.register(info.number, m.dedup_id)
        out: list[int] = []
        for i, m in enumerate(messages):
            mid = ids[i]
            if mid is None or mid < 0:  # a copy of an earlier message in this batch
                assert m.dedup_id is not None
                first = known[m.dedup_id]
                mid = ids[-1 - first] if first < 0 else first
            assert mid is not None and mid >= 0
            out.append(mid)
        return PreparedWrite(info, out, ops, written, grouped, delayed, stored)

    def _allocate(self, fresh: list[tuple[int, NewMessage]], ids: list[int | None]) -> None:
        """Draw ids for the messages to write: the plain ones share a lane, each
        grouped one goes to its group's lane."""
        plain = [i for i, m in fresh if m.group is None]
        if plain:
            lane = self.ids.next_lane(len(plain))
            for i, mid in zip(plain, self.ids.allocate(lane, len(plain)), strict=True):
                ids[i] = mid
        for i, m in fresh:
            if m.group is not None:
                ids[i] = self.ids.allocate(group_lane(m.group), 1)[0]

    async def _observe_group_lanes(self, info: QueueInfo, groups: list[str]) -> None:
        """Draw group ids after the newest id stored in each group's lane.

        Group order is id order; ids carry each writer's clock, so without this
        a message sent through a node whose clock is behind (or after one sent
        through a node ahead) would sort before an earlier message of its group.
        One reversed index read per lane, all in one store call (LMDB: one
        thread hop, not one per lane); the writes that follow a durable write
        see it, so a send that follows an acknowledged one always sorts after it.
        """
        lanes = sorted({group_lane(g) for g in groups})
        seen = None if self._observed is None else self._observed.setdefault(info.number, set())
        if seen is not None:
            lanes = [lane for lane in lanes if lane not in seen]
        if not lanes:
            return
        lasts = await self._store.last_keys(
            [
                (
                    keys.message(info.number, lane_start(lane)),
                    keys.message(info.number, lane_start(lane + 1)),
                )
                for lane in lanes
            ]
        )
        for lane, last in zip(lanes, lasts, strict=True):
            if last is not None:
                self.ids.observe(lane, keys.message_id(last))
        if seen is not None:
            seen.update(lanes)

    def note_written(self, w: PreparedWrite) -> None:
        """Account for a prepared write once it is durable: every message it adds,
        visible or delayed, counts as sent (``<queue>.sent``) here and only here (the
        delay mover making a delayed one visible later counts nothing); the delayed
        ones count in ``<queue>.delayed`` as well."""
        sent = len(w.written) + w.delayed
        if sent:
            self._metrics.incr(f"{w.info.name}.sent.count", sent)
        if w.delayed:
            self._metrics.incr(f"{w.info.name}.delayed.count", w.delayed)
        if not w.written:
            return
        info = w.info
        self._states.add_depth(info.number, len(w.written))
        st = self._states.get(info.number)
        lanes = {lane_of(i) for i in w.written}
        if st is not None:
            for lane in lanes:
                st.note_enqueued(lane)
            for mid in w.grouped:
                st.note_group_written(mid)
        self._hints.enqueued(info, lanes, w.grouped)

    def check_for_queue(self, info: QueueInfo, messages: Sequence[NewMessage]) -> None:
        """Refuse messages ``info``'s own settings do not take (body size, FIFO groups)."""
        limit = info.settings.max_message_bytes
        for m in messages:
            if len(m.body) > limit:
                raise PayloadTooLarge(
                    f"a message body is {len(m.body)} bytes; queue {info.name!r} takes "
                    f"at most {limit} (max_message_bytes)"
                )
            if info.settings.fifo and m.group is None:
                raise InvalidInput(f"queue {info.name!r} is FIFO: every message needs a group")

    async def write(self, info: QueueInfo, messages: Sequence[NewMessage]) -> list[int]:
        """Store ``messages`` durably in one queue; return their ids in order. On a
        queue with ``content_based_dedup`` a message sent without a dedup id is
        deduplicated by the SHA-256 of its body (as SQS does), whichever API sent it."""
        if info.settings.content_based_dedup:
            messages = [
                m if m.dedup_id is not None else replace(m, dedup_id=_body_digest(m.body))
                for m in messages
            ]
        self.check_for_queue(info, messages)
        if all(m.dedup_id is None for m in messages):
            # The common case, inline: no dedup lock to hold, and nothing a
            # cancelled caller must see finished (see run_to_completion).
            w = await self.prepare(info, messages)
            if w.ops:
                await self._store.write_batch(w.ops)
            self.note_written(w)
            return w.ids

        async def write() -> PreparedWrite:
            async with self.dedup.guard([info], messages) as claim:
                w = await self.prepare(info, messages, claim)
                claim.unlock()  # concurrent writes with other ids share the commit
                if w.ops:
                    await self._store.write_batch(w.ops)
            self.note_written(w)
            return w

        return (await self.run_to_completion(write(), messages)).ids


def _body_digest(body: bytes) -> str:
    """SQS's content-based deduplication id: the SHA-256 of the body, in hex."""
    return hashlib.sha256(body).hexdigest()
