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
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.ids import MAX_ID, IdGenerator, lane_of
from dynaq.core.membership import MembershipView
from dynaq.core.partitions import Partition, QueueState
from dynaq.errors import InvalidInput, PayloadTooLarge
from dynaq.metrics import Metrics
from dynaq.services.catalog import Catalog, QueueInfo
from dynaq.services.messages import Message, NewMessage, decode, encode
from dynaq.storage.base import Delete, Put, Store

log = logging.getLogger(__name__)

_MAX_SCAN_PAGE = 4096
_MAINTAIN_EVERY_S = 1.0


DeleteListener = Callable[["QueueInfo", list[Message]], Awaitable[None]]
"""Called after messages were deleted (acknowledged), with the deleted messages."""


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
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._view = view
        self._clock = clock
        self._ids = ids
        self._metrics = metrics
        self.limits = limits
        self._idle_rescan_s = idle_rescan_s
        self._states: dict[int, QueueState] = {}
        self._last_maintained: dict[int, float] = {}
        self._depth: dict[int, int] = {}
        self._purges: dict[int, asyncio.Task[None]] = {}
        self._delete_listeners: list[DeleteListener] = []
        catalog.on_queue_change(self._queue_changed)
        view.on_change(self._membership_changed)
        metrics.add_gauge_provider(self._gauges)

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

    async def stop(self) -> None:
        """Stop background purges (they resume at the next start)."""
        tasks = list(self._purges.values())
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

    def build_puts(
        self, info: QueueInfo, messages: Sequence[NewMessage]
    ) -> tuple[list[int], list[Put]]:
        """Draw ids and encode ``messages`` for ``info`` without writing them."""
        lane = self._ids.next_lane(len(messages))
        ids = self._ids.allocate(lane, len(messages))
        now_ms = self._clock.wall_ms()
        compress = info.settings.compressed_messages
        puts = [
            Put(keys.message(info.number, mid), encode(m, now_ms, compress))
            for mid, m in zip(ids, messages, strict=True)
        ]
        return list(ids), puts

    def note_written(self, info: QueueInfo, ids: Sequence[int]) -> None:
        """Account for messages written by :meth:`build_puts` once they are durable."""
        if not ids:
            return
        self._depth[info.number] = self._depth.get(info.number, 0) + len(ids)
        st = self._states.get(info.number)
        if st is not None:
            for lane in {lane_of(i) for i in ids}:
                st.note_enqueued(lane)
        self._metrics.incr(f"{info.name}.sent.count", len(ids))

    async def enqueue(self, queue: str, messages: Sequence[NewMessage]) -> list[int]:
        """Store ``messages`` durably in ``queue``; return their ids in order."""
        if not messages:
            return []
        if len(messages) > self.limits.max_batch:
            raise InvalidInput(
                f"a batch holds at most {self.limits.max_batch} messages, got {len(messages)}"
            )
        for m in messages:
            self.check_message(m)
        info = await self._catalog.queue(queue)
        ids, puts = self.build_puts(info, messages)
        await self._store.write_batch(puts)
        self.note_written(info, ids)
        return ids

    # reads ------------------------------------------------------------------

    def check_batch_size(self, n: int) -> None:
        if not 1 <= n <= self.limits.max_batch:
            raise InvalidInput(f"batch size must be an integer in 1..{self.limits.max_batch}")

    async def receive(
        self, queue: str, max_messages: int, visibility_timeout_s: float | None = None
    ) -> list[Message]:
        """Serve up to ``max_messages`` visible messages and make them invisible.

        Expired in-flight messages are served first, then partitions least
        recently used first. Returns ``[]`` when nothing is visible.
        """
        self.check_batch_size(max_messages)
        if visibility_timeout_s is not None and not 0 <= visibility_timeout_s <= 43_200:
            raise InvalidInput("visibility timeout must be in 0..43200 seconds")
        info = await self._catalog.queue(queue)
        st = self._state(info)
        vt = (
            info.settings.visibility_timeout_s
            if visibility_timeout_s is None
            else visibility_timeout_s
        )
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
        if out:
            self._metrics.incr(f"{info.name}.received.count", len(out))
        self._metrics.gauge(f"{info.name}.fill.count", 100.0 * len(out) / max_messages)
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
        items = await self._store.get_many([keys.message(info.number, m) for m in expired])
        now = self._clock.monotonic()
        out: list[Message] = []
        for mid, item in zip(expired, items, strict=True):
            if item is None:
                st.forget(mid)  # deleted through another node
            elif st.is_invisible(mid, now):
                continue  # a concurrent receive took it first
            else:
                f = st.mark_served(mid, now, vt)
                out.append(decode(mid, item.value, f.receive_count))
        return out

    async def _scan_partition(
        self, info: QueueInfo, st: QueueState, p: Partition, want: int, vt: float
    ) -> list[Message]:
        bottom, top = p.lanes.bottom_id, p.lanes.top_id + 1
        start = bottom if p.cursor is None else p.cursor
        end = top
        from_bottom = start == bottom
        out: list[Message] = []
        while True:
            limit = min(_MAX_SCAN_PAGE, want - len(out) + 64)
            rows = await self._store.scan(
                keys.message(info.number, start), keys.message(info.number, end), limit
            )
            now = self._clock.monotonic()
            last = start
            for k, v in rows:
                last = keys.message_id(k)
                p.pass_count += 1
                if st.is_invisible(last, now):
                    continue
                f = st.mark_served(last, now, vt)
                out.append(decode(last, v, f.receive_count))
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
                if not out:
                    p.idle, p.idle_since = True, now
                break
            # Wrap around once: rescan the part before where this pass began.
            end, start, from_bottom = start if p.cursor is None else p.cursor, bottom, True
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
        """Be told about every deleted message (with its attributes), after the delete is durable.

        With listeners registered, a delete reads the messages it removes
        first (one batched read), so listeners see attributes such as a batch
        item id. Without listeners, deletes never read.
        """
        self._delete_listeners.append(listener)

    async def delete(self, queue: str, ids: Iterable[int]) -> list[int]:
        """Delete messages; return the ids that existed (and were removed)."""
        info = await self._catalog.queue(queue)
        ids = list(dict.fromkeys(ids))
        if not ids:
            return []
        before: list[Message] = []
        if self._delete_listeners:
            items = await self._store.get_many([keys.message(info.number, i) for i in ids])
            before = [decode(i, it.value) for i, it in zip(ids, items, strict=True) if it]
        existed = await self._store.write_batch([Delete(keys.message(info.number, i)) for i in ids])
        st = self._states.get(info.number)
        removed = [i for i, e in zip(ids, existed, strict=True) if e]
        if st is not None:
            for i in ids:
                st.forget(i)
        if removed:
            self._depth[info.number] = max(0, self._depth.get(info.number, 0) - len(removed))
            self._metrics.incr(f"{info.name}.deleted.count", len(removed))
            if before:
                gone = set(removed)
                deleted = [m for m in before if m.id in gone]
                for listener in self._delete_listeners:
                    await listener(info, deleted)
        return removed

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
                p = st.partition_of_lane(lane_of(i))
                if p is not None:
                    p.wake()
        return changed


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
