"""The queue service: enqueue, receive, delete, peek, visibility, over the storage contract.

Guarantees:

* An enqueue returns only after its messages are durable in the store.
* Delivery is at-least-once: a received message that is not deleted within
  its visibility timeout is served again (its receive count goes up).
* Within one lane, messages are served oldest first; across lanes and
  partitions there is no global order (as in Dynamiq and SQS standard queues).
* Receives on this node serve only this node's slice of the keyspace;
  enqueues, deletes and peeks work for any id.
* ``depth`` is exact on a single node (every write goes through it); in a
  cluster each node counts only what passed through it, so the cluster-wide
  figure is ``approximate_depth``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import msgpack

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.batch_items import BATCH_ITEM_ATTRIBUTE, parse_item_id
from dynaq.core.ids import MAX_ID, IdGenerator, group_lane, lane_of
from dynaq.core.keyspace import LaneRange, slices
from dynaq.core.membership import Member, MembershipView
from dynaq.core.partitions import Partition, QueueState
from dynaq.errors import InvalidInput, PayloadTooLarge
from dynaq.metrics import Metrics
from dynaq.services.catalog import Catalog, QueueInfo
from dynaq.services.messages import Message, NewMessage, decode, encode
from dynaq.storage.base import Delete, Put, Store, prefix_end

log = logging.getLogger(__name__)

_MAX_SCAN_PAGE = 4096
_MAINTAIN_EVERY_S = 1.0


class PeerHints(Protocol):
    """Tells the node that owns a slice about writes made elsewhere (best effort).

    Without hints the owner still finds new messages on its next rescan and
    learns of deletes when the visibility timeout expires; hints make both
    immediate, which matters for message groups.
    """

    def deleted(self, owner: Member, queue: str, ids: list[int]) -> None: ...

    def enqueued(self, owner: Member, queue: str, lanes: list[int]) -> None: ...


DeleteListener = Callable[["QueueInfo", list[tuple[int, dict[str, str]]]], Awaitable[None]]
"""Called after messages were deleted (acknowledged), with ``(id, attributes)`` of
each deleted message that had attributes."""


T = TypeVar("T")

MAX_WAIT_S = 20.0
"""Longest long poll (SQS's limit)."""

MAX_TAG_CHARS = 128
"""Longest message group or dedup id."""


@dataclass(slots=True)
class PreparedWrite:
    """Messages encoded for one queue, ready to go into a storage batch."""

    info: QueueInfo
    ids: list[int]
    """One id per input message (the earlier message's id for a dedup hit)."""
    ops: list[Put]
    written: list[int]
    """Ids of the messages this write actually adds."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Input limits, enforced before anything is written."""

    max_message_bytes: int = 256 * 1024
    max_batch: int = 1000


class QueueService:
    """Queues on one node: writes go anywhere, receives serve this node's slice."""

    def __init__(
        self,
        store: Store,
        catalog: Catalog,
        view: MembershipView,
        clock: Clock,
        ids: IdGenerator,
        metrics: Metrics,
        limits: Limits,
        idle_rescan_s: float = 1.0,
        dedup_window_s: float = 300.0,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._view = view
        self._clock = clock
        self._ids = ids
        self._metrics = metrics
        self.limits = limits
        self._idle_rescan_s = idle_rescan_s
        self._dedup_window_s = dedup_window_s
        self._dedup_locks: dict[int, asyncio.Lock] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._peers: PeerHints | None = None
        self._draining = False
        self._states: dict[int, QueueState] = {}
        self._last_maintained: dict[int, float] = {}
        self._depth: dict[int, int] = {}
        self._purges: dict[int, asyncio.Task[None]] = {}
        self._delete_listeners: list[DeleteListener] = []
        catalog.on_queue_change(self._queue_changed)
        view.on_change(self._membership_changed)
        metrics.add_gauge_provider(self._gauges)

    def set_ids(self, ids: IdGenerator) -> None:
        """Draw ids from ``ids`` from now on (a cluster node's leased writer slot)."""
        self._ids = ids

    def set_peer_hints(self, peers: PeerHints) -> None:
        """Forward enqueue/delete hints to the owners of other slices."""
        self._peers = peers

    def _remote_owners(self, lanes: Iterable[int]) -> dict[Member, list[int]]:
        mine = self._view.my_slice
        out: dict[Member, list[int]] = {}
        for lane in lanes:
            if lane not in mine:
                out.setdefault(self._view.owner_of_lane(lane), []).append(lane)
        return out

    def apply_hints(self, queue: str, deleted: Sequence[int], lanes: Sequence[int]) -> None:
        """Apply hints from a peer: messages deleted there, lanes written there."""
        info = self._catalog.cached_queue(queue)
        if info is None:
            return
        st = self._states.get(info.number)
        if st is None:
            return
        if deleted:
            st.note_deleted(deleted)
            for i in deleted:
                st.forget(i)
        for lane in lanes:
            st.note_enqueued(lane)

    def handover(self) -> dict[Member, dict[str, list[list[Any]]]]:
        """This node's in-flight messages, grouped by the member that serves each
        message's lane once this node has left the ring: ``{member: {queue:
        [[id, seconds_left, receive_count, group], ...]}}``.

        Sent before a graceful leave, so the new owners keep those messages
        invisible until their deadlines instead of serving them again at once
        while their consumers are still working on them.
        """
        me = self._view.me.name
        others = {m.name: m for m in self._view.members if m.name != me}
        if not others:
            return {}
        new = slices(list(others))
        owner_of = {
            lane: others[name] for name, rng in new.items() for lane in range(rng.lo, rng.hi)
        }
        now = self._clock.monotonic()
        out: dict[Member, dict[str, list[list[Any]]]] = {}
        for name in self._catalog.queue_names():
            info = self._catalog.cached_queue(name)
            st = self._states.get(info.number) if info is not None else None
            if st is None:
                continue
            for mid, f in st.inflight.items():
                if f.deadline > now:
                    entry = [mid, f.deadline - now, f.receive_count, f.group]
                    out.setdefault(owner_of[f.lane], {}).setdefault(name, []).append(entry)
        return out

    def apply_handover(self, queue: str, entries: Sequence[Sequence[Any]]) -> None:
        """Take over in-flight messages from a leaving peer (see :meth:`handover`)."""
        info = self._catalog.cached_queue(queue)
        if info is None:
            return
        st = self._state(info)
        now = self._clock.monotonic()
        for mid, seconds_left, receive_count, group in entries:
            f = st.mark_served(int(mid), now, float(seconds_left), group)
            f.receive_count = max(f.receive_count, int(receive_count))

    # lifecycle ------------------------------------------------------------

    async def start(self) -> None:
        """Load config, count stored messages, resume interrupted purges."""
        await self._catalog.reload()
        for name in self._catalog.queue_names():
            info = self._catalog.cached_queue(name)
            if info is not None and info.number not in self._depth:
                self._depth[info.number] = await self._count(info.number)
        for key in await self._store.list_keys(keys.PURGE, 10_000):
            self._start_purge(keys.purge_number(key))
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="dedup-sweeper")

    async def _sweep_loop(self) -> None:
        interval = max(1.0, min(60.0, self._dedup_window_s / 2))
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep_dedup()
            except Exception:  # keep sweeping on the next round
                log.exception("dedup sweep failed")

    async def sweep_dedup(self, limit: int = 100_000) -> int:
        """Delete dedup records whose window has passed; return how many."""
        now_ms = self._clock.wall_ms()
        start, end = keys.DEDUP, prefix_end(keys.DEDUP)
        removed = seen = 0
        while seen < limit:
            rows = await self._store.scan(start, end, 1000)
            if not rows:
                break
            seen += len(rows)
            stale = [k for k, v in rows if msgpack.unpackb(v)[1] <= now_ms]
            if stale:
                await self._store.write_batch([Delete(k) for k in stale])
                removed += len(stale)
            start = rows[-1][0] + b"\x00"
        return removed

    def drain(self) -> None:
        """The node is shutting down: long polls answer now instead of waiting."""
        self._draining = True
        for st in self._states.values():
            st.signal.set()

    async def stop(self) -> None:
        """Stop background purges (they resume at the next start) and the sweeper."""
        tasks = list(self._purges.values())
        if self._sweeper is not None:
            tasks.append(self._sweeper)
            self._sweeper = None
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    async def _count(self, number: int) -> int:
        start, end = keys.queue_messages(number)
        n = 0
        while True:
            rows = await self._store.list_keys(start[:5], 10_000, start if n else None)
            n += len(rows)
            if len(rows) < 10_000:
                return n
            start = rows[-1]
        _ = end

    def _queue_changed(self, old: QueueInfo | None, new: QueueInfo | None) -> None:
        if old is not None and (new is None or new.number != old.number):
            self._states.pop(old.number, None)
            self._depth.pop(old.number, None)
            if new is None:
                self._start_purge(old.number)
        if new is not None:
            self._depth.setdefault(new.number, 0)

    def _membership_changed(self) -> None:
        now = self._clock.monotonic()
        for st in self._states.values():
            st.relayout(self._view.my_slice, st.count, now)
            st.drop_outside(self._view.my_slice)

    def _start_purge(self, number: int) -> None:
        if number in self._purges:
            return
        task = asyncio.get_running_loop().create_task(self._purge(number), name=f"purge-{number}")
        self._purges[number] = task
        task.add_done_callback(lambda _t: self._purges.pop(number, None))

    async def _purge(self, number: int) -> None:
        start, end = keys.queue_messages(number)
        removed = await self._store.delete_range(start, end)
        await self._store.delete_range(*keys.dedup_queue_range(number))
        await self._store.delete(keys.purge_marker(number))
        log.info("queue messages purged", extra={"number": number, "removed": removed})

    async def wait_for_purges(self) -> None:
        """Wait until every pending purge finished (for tests and shutdown)."""
        while self._purges:
            await asyncio.gather(*list(self._purges.values()), return_exceptions=True)

    # state ----------------------------------------------------------------

    def _state(self, info: QueueInfo) -> QueueState:
        st = self._states.get(info.number)
        if st is None:
            st = QueueState(
                self._view.my_slice, info.settings.min_partitions, self._clock.monotonic()
            )
            self._states[info.number] = st
        return st

    def partition_count(self, info: QueueInfo) -> int:
        """How many partitions this node serves the queue from."""
        return self._state(info).count

    @property
    def store(self) -> Store:
        """The store messages live in (for snapshot readers)."""
        return self._store

    def partition_ranges(self, info: QueueInfo) -> list[LaneRange]:
        """The lane ranges of the partitions this node serves the queue from."""
        return [p.lanes for p in self._state(info).partitions]

    def depth(self, info: QueueInfo) -> int:
        return self._depth.get(info.number, 0)

    def in_flight(self, info: QueueInfo) -> int:
        st = self._states.get(info.number)
        return 0 if st is None else len(st.inflight)

    def _gauges(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name in self._catalog.queue_names():
            info = self._catalog.cached_queue(name)
            if info is None:
                continue
            out[f"{name}.depth.count"] = self._depth.get(info.number, 0)
            st = self._states.get(info.number)
            if st is not None:
                seen = sum(max(p.last_pass_count, p.pass_count) for p in st.partitions)
                out[f"{name}.approximate_depth.count"] = seen
        return out

    # writes -----------------------------------------------------------------

    def check_message(self, msg: NewMessage) -> None:
        if len(msg.body) > self.limits.max_message_bytes:
            raise PayloadTooLarge(
                f"message body is {len(msg.body)} bytes; the limit is "
                f"{self.limits.max_message_bytes}"
            )
        for name, value in (("group", msg.group), ("dedup_id", msg.dedup_id)):
            if value is not None and not 1 <= len(value) <= MAX_TAG_CHARS:
                raise InvalidInput(f"{name} must be 1..{MAX_TAG_CHARS} characters")
        if msg.attributes and BATCH_ITEM_ATTRIBUTE in msg.attributes:
            parse_item_id(msg.attributes[BATCH_ITEM_ATTRIBUTE])  # 422 now, not a lost ack later

    @asynccontextmanager
    async def dedup_guard(
        self, infos: Sequence[QueueInfo], messages: Sequence[NewMessage]
    ) -> AsyncIterator[None]:
        """Serialize writes that carry dedup ids, per queue, on this node.

        The dedup check and the write are two store calls; holding the
        queue's lock across both makes two racing enqueues with the same id
        on one node impossible. (Across nodes a race within milliseconds can
        still enqueue twice: documented.) Batches without dedup ids never wait.
        """
        if not any(m.dedup_id for m in messages):
            yield
            return
        async with contextlib.AsyncExitStack() as stack:
            for info in sorted(infos, key=lambda i: i.number):
                lock = self._dedup_locks.setdefault(info.number, asyncio.Lock())
                await stack.enter_async_context(lock)
            yield

    async def prepare(self, info: QueueInfo, messages: Sequence[NewMessage]) -> PreparedWrite:
        """Draw ids and encode ``messages`` for ``info`` without writing them.

        A message whose dedup id was seen within the window gets the earlier
        message's id and is not written again. Grouped messages go to their
        group's lane; the others share one lane so the write appends.
        """
        ids: list[int | None] = [None] * len(messages)
        known: dict[str, int] = {}
        wanted = list(dict.fromkeys(m.dedup_id for m in messages if m.dedup_id))
        now_ms = self._clock.wall_ms()
        if wanted:
            items = await self._store.get_many([keys.dedup(info.number, d) for d in wanted])
            for d, item in zip(wanted, items, strict=True):
                if item is not None:
                    mid, expires_ms = msgpack.unpackb(item.value)
                    if expires_ms > now_ms:
                        known[d] = int(mid)
        fresh: list[tuple[int, NewMessage]] = []
        for i, m in enumerate(messages):
            if m.dedup_id is not None and m.dedup_id in known:
                ids[i] = known[m.dedup_id]
            else:
                fresh.append((i, m))
                if m.dedup_id is not None:
                    known[m.dedup_id] = -1 - i  # later copies in this batch point here
        plain = [i for i, m in fresh if m.group is None]
        if plain:
            lane = self._ids.next_lane(len(plain))
            for i, mid in zip(plain, self._ids.allocate(lane, len(plain)), strict=True):
                ids[i] = mid
        for i, m in fresh:
            if m.group is not None:
                ids[i] = self._ids.allocate(group_lane(m.group), 1)[0]
        compress = info.settings.compressed_messages
        expires_ms = now_ms + int(self._dedup_window_s * 1000)
        ops: list[Put] = []
        written: list[int] = []
        for i, m in fresh:
            mid = ids[i]
            assert mid is not None
            ops.append(Put(keys.message(info.number, mid), encode(m, now_ms, compress)))
            written.append(mid)
            if m.dedup_id is not None:
                record = msgpack.packb([mid, expires_ms])
                ops.append(Put(keys.dedup(info.number, m.dedup_id), record))
        out: list[int] = []
        for i, m in enumerate(messages):
            mid = ids[i]
            if mid is None or mid < 0:  # a copy of an earlier message in this batch
                assert m.dedup_id is not None
                first = known[m.dedup_id]
                mid = ids[-1 - first] if first < 0 else first
            assert mid is not None and mid >= 0
            out.append(mid)
        return PreparedWrite(info, out, ops, written)

    def note_written(self, w: PreparedWrite) -> None:
        """Account for a prepared write once it is durable."""
        if not w.written:
            return
        info = w.info
        self._depth[info.number] = self._depth.get(info.number, 0) + len(w.written)
        st = self._states.get(info.number)
        lanes = {lane_of(i) for i in w.written}
        if st is not None:
            for lane in lanes:
                st.note_enqueued(lane)
        if self._peers is not None:
            for owner, owned in self._remote_owners(lanes).items():
                self._peers.enqueued(owner, info.name, owned)
        self._metrics.incr(f"{info.name}.sent.count", len(w.written))

    def check_batch(self, messages: Sequence[NewMessage]) -> None:
        if len(messages) > self.limits.max_batch:
            raise InvalidInput(
                f"a batch holds at most {self.limits.max_batch} messages, got {len(messages)}"
            )
        for m in messages:
            self.check_message(m)

    async def enqueue(self, queue: str, messages: Sequence[NewMessage]) -> list[int]:
        """Store ``messages`` durably in ``queue``; return their ids in order."""
        if not messages:
            return []
        self.check_batch(messages)
        info = await self._catalog.queue(queue)

        async def write() -> PreparedWrite:
            async with self.dedup_guard([info], messages):
                w = await self.prepare(info, messages)
                if w.ops:
                    await self._store.write_batch(w.ops)
            self.note_written(w)
            return w

        return (await run_to_completion(write(), messages)).ids

    # reads ------------------------------------------------------------------

    def check_batch_size(self, n: int) -> None:
        if not 1 <= n <= self.limits.max_batch:
            raise InvalidInput(f"batch size must be an integer in 1..{self.limits.max_batch}")

    async def receive(
        self,
        queue: str,
        max_messages: int,
        visibility_timeout_s: float | None = None,
        wait_time_s: float = 0.0,
    ) -> list[Message]:
        """Serve up to ``max_messages`` visible messages and make them invisible.

        Expired in-flight messages are served first, then partitions least
        recently used first. With ``wait_time_s`` > 0 (long polling, at most
        20 s) an empty receive waits until something may be visible or the
        time is up. Returns ``[]`` when nothing is visible.
        """
        self.check_batch_size(max_messages)
        if visibility_timeout_s is not None and not 0 <= visibility_timeout_s <= 43_200:
            raise InvalidInput("visibility timeout must be in 0..43200 seconds")
        if not 0 <= wait_time_s <= MAX_WAIT_S:
            raise InvalidInput(f"wait time must be in 0..{MAX_WAIT_S:g} seconds")
        info = await self._catalog.queue(queue)
        vt = (
            info.settings.visibility_timeout_s
            if visibility_timeout_s is None
            else visibility_timeout_s
        )
        loop = asyncio.get_running_loop()
        give_up = loop.time() + wait_time_s
        while True:
            st = self._state(info)
            st.signal.clear()
            out = await self._receive_once(info, st, max_messages, vt)
            left = give_up - loop.time()
            if out or left <= 0 or self._draining:
                break
            pause = min(left, max(0.05, self._idle_rescan_s))
            nxt = st.next_deadline()
            if nxt is not None:
                pause = min(pause, max(0.0, nxt - self._clock.monotonic()) + 0.001)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(st.signal.wait(), pause)
            info = await self._catalog.queue(queue)
        if out:
            self._metrics.incr(f"{info.name}.received.count", len(out))
        self._metrics.gauge(f"{info.name}.fill.count", 100.0 * len(out) / max_messages)
        return out

    async def _receive_once(
        self, info: QueueInfo, st: QueueState, max_messages: int, vt: float
    ) -> list[Message]:
        now = self._clock.monotonic()
        self._maintain(info, st, now)
        out = await self._serve_expired(info, st, max_messages, vt)
        busy: list[Partition] = []
        for p in st.serving_order(now, self._idle_rescan_s):
            if len(out) >= max_messages:
                break
            if p.lock.locked():
                busy.append(p)
                continue
            async with p.lock:
                out.extend(await self._scan_partition(info, st, p, max_messages - len(out), vt))
        if not out and busy:
            # Every partition with work is being scanned by another receive:
            # queue behind the least recently used one rather than answer empty.
            p = busy[0]
            async with p.lock:
                out.extend(await self._scan_partition(info, st, p, max_messages, vt))
        now = self._clock.monotonic()
        if st.all_locked(now) and st.split(now, info.settings.max_partitions):
            log.debug("partition split", extra={"queue": info.name, "partitions": st.count})
        return out

    def _maintain(self, info: QueueInfo, st: QueueState, now: float) -> None:
        if now - self._last_maintained.get(info.number, float("-inf")) < _MAINTAIN_EVERY_S:
            return
        self._last_maintained[info.number] = now
        s = info.settings
        target = min(max(st.count, s.min_partitions), s.max_partitions)
        if target != st.count:
            st.relayout(self._view.my_slice, target, now)
        elif st.merge_stale(now, s.min_partitions, s.max_partition_age_s):
            log.debug("partition merged", extra={"queue": info.name, "partitions": st.count})

    async def _serve_expired(
        self, info: QueueInfo, st: QueueState, want: int, vt: float
    ) -> list[Message]:
        now = self._clock.monotonic()
        expired = list(st.expired(now, want))
        if not expired:
            return []
        token = st.begin_read()
        try:
            items = await self._store.get_many([keys.message(info.number, m) for m in expired])
        finally:
            st.end_read(token)
        now = self._clock.monotonic()
        out: list[Message] = []
        for mid, item in zip(expired, items, strict=True):
            if item is None or st.deleted_since(mid, token):
                st.forget(mid)  # deleted through another node
            elif st.is_invisible(mid, now):
                continue  # a concurrent receive took it first
            else:
                msg = decode(mid, item.value)
                f = st.mark_served(mid, now, vt, msg.group, msg.attributes)
                msg.receive_count = f.receive_count
                out.append(msg)
        return out

    async def _scan_partition(
        self, info: QueueInfo, st: QueueState, p: Partition, want: int, vt: float
    ) -> list[Message]:
        bottom, top = p.lanes.bottom_id, p.lanes.top_id + 1
        wakes = p.wakes  # a wake-up during this scan must not be lost to idling
        start = first_start = p.take_start()
        end = top
        from_bottom = start == bottom
        out: list[Message] = []
        blocked: set[str] = set()
        page = 0
        while True:
            # First page: exactly what is wanted (most scans skip nothing);
            # pages after skips grow, so long in-flight runs cost few reads.
            limit = min(_MAX_SCAN_PAGE, want - len(out) if page == 0 else 2 * want + 64)
            page += 1
            token = st.begin_read()
            try:
                rows = await self._store.scan(
                    keys.message(info.number, start), keys.message(info.number, end), limit
                )
            finally:
                st.end_read(token)
            now = self._clock.monotonic()
            last = start
            for k, v in rows:
                last = keys.message_id(k)
                p.pass_count += 1
                if st.deleted_since(last, token):
                    continue
                f = st.inflight.get(last)
                if f is not None and f.deadline > now:
                    if f.group is not None:
                        blocked.add(f.group)
                    continue
                msg = decode(last, v)
                g = msg.group
                if g is not None and (g in blocked or st.group_blocked(g, last)):
                    blocked.add(g)  # later messages of the group wait their turn
                    continue
                msg.receive_count = st.mark_served(last, now, vt, g, msg.attributes).receive_count
                out.append(msg)
                if len(out) >= want:
                    break
            if len(out) >= want:
                p.cursor = last + 1 if last + 1 < top else None
                break
            if len(rows) == limit:
                start = last + 1
                continue
            # Reached the end of this pass.
            if end == top:
                p.last_pass_count, p.pass_count = p.pass_count, 0
            if from_bottom:
                p.cursor = None
                if not out and p.wakes == wakes:
                    p.idle, p.idle_since = True, now
                break
            # Wrap around once: rescan the part before where this pass began.
            end, start, from_bottom = first_start, bottom, True
        if out:
            p.idle = False
            p.last_used = self._clock.monotonic()
            p.locked_until = p.last_used + vt
        return out

    async def peek(self, queue: str, ids: Iterable[int]) -> list[Message]:
        """Return the stored messages among ``ids`` without locking them."""
        info = await self._catalog.queue(queue)
        ids = list(dict.fromkeys(ids))
        items = await self._store.get_many([keys.message(info.number, i) for i in ids])
        return [decode(i, it.value) for i, it in zip(ids, items, strict=True) if it is not None]

    # deletes & visibility -------------------------------------------------------

    def add_delete_listener(self, listener: DeleteListener) -> None:
        """Be told about every deleted message with attributes, after the delete is durable.

        A message this node has in flight (it served it) carries its attributes
        in the in-flight table, so the usual receive-then-delete costs no read;
        other ids (deleted through a node that did not serve them, or never
        received) are read in one batch before the delete.
        """
        self._delete_listeners.append(listener)

    async def delete(self, queue: str, ids: Iterable[int]) -> list[int]:
        """Delete messages; return the ids that existed (and were removed)."""
        info = await self._catalog.queue(queue)
        ids = list(dict.fromkeys(ids))
        if not ids:
            return []
        st = self._states.get(info.number)
        attrs: dict[int, dict[str, str]] = {}
        if self._delete_listeners:
            attrs = await self._attributes(info, st, ids)
        existed = await self._store.write_batch([Delete(keys.message(info.number, i)) for i in ids])
        removed = [i for i, e in zip(ids, existed, strict=True) if e]
        if st is not None:
            st.note_deleted(ids)
            for i in ids:
                st.forget(i)
        if self._peers is not None and removed:
            by_lane: dict[int, list[int]] = {}
            for i in removed:
                by_lane.setdefault(lane_of(i), []).append(i)
            for owner, owned in self._remote_owners(by_lane).items():
                self._peers.deleted(owner, info.name, [i for ln in owned for i in by_lane[ln]])
        if removed:
            self._depth[info.number] = max(0, self._depth.get(info.number, 0) - len(removed))
            self._metrics.incr(f"{info.name}.deleted.count", len(removed))
            if attrs:
                deleted = [(i, attrs[i]) for i in removed if i in attrs]
                if deleted:
                    for listener in self._delete_listeners:
                        await listener(info, deleted)
        return removed

    async def _attributes(
        self, info: QueueInfo, st: QueueState | None, ids: list[int]
    ) -> dict[int, dict[str, str]]:
        """Attributes of the messages about to be deleted: from the in-flight table, else read."""
        out: dict[int, dict[str, str]] = {}
        unknown: list[int] = []
        for i in ids:
            f = st.inflight.get(i) if st is not None else None
            if f is None:
                unknown.append(i)
            elif f.attributes:
                out[i] = f.attributes
        if unknown:
            items = await self._store.get_many([keys.message(info.number, i) for i in unknown])
            for i, it in zip(unknown, items, strict=True):
                if it is not None:
                    m = decode(i, it.value)
                    if m.attributes:
                        out[i] = m.attributes
        return out

    async def change_visibility(
        self, queue: str, ids: Iterable[int], visibility_timeout_s: float
    ) -> list[int]:
        """Extend (or with 0, release) in-flight messages; return the ids that were in flight here."""
        if not 0 <= visibility_timeout_s <= 43_200:
            raise InvalidInput("visibility timeout must be in 0..43200 seconds")
        info = await self._catalog.queue(queue)
        st = self._states.get(info.number)
        if st is None:
            return []
        now = self._clock.monotonic()
        changed = [i for i in ids if st.set_visibility(i, now, visibility_timeout_s)]
        if visibility_timeout_s == 0:
            for i in changed:
                st.poke(lane_of(i))
        return changed


async def run_to_completion(write: Coroutine[Any, Any, T], messages: Sequence[NewMessage]) -> T:
    """Await ``write``; if it carries dedup ids, finish it even when the caller is cancelled.

    A cancelled caller (a client timeout) does not cancel a write already handed
    to the store, so the dedup lock must stay held until that write has landed:
    released early, a retry of the same dedup id would check, find nothing yet,
    and store a second copy.
    """
    if not any(m.dedup_id for m in messages):
        return await write
    return await asyncio.shield(asyncio.ensure_future(write))


def parse_id(text: str) -> int:
    """Parse a message id from a URL or body; :class:`InvalidInput` if malformed."""
    t = text.strip()
    if not t.isdigit() or len(t) > 19:
        raise InvalidInput(
            f"malformed message id {text!r}: expected a decimal integer in [0, 2^63)"
        )
    value = int(t)
    if value > MAX_ID:
        raise InvalidInput(f"message id {text!r} is out of range [0, 2^63)")
    return value
