"""Receiving messages: the long poll, expired in-flight first, then partition scans.

Delivery is at-least-once: a received message that is not deleted within its
visibility timeout is served again (its receive count goes up). Within one
lane messages are served oldest first; a message group has at most one
message in flight and is served in id order. Receives on this node serve only
this node's slice of the keyspace.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.ids import lane_of, lane_start
from dynaq.core.membership import MembershipView
from dynaq.core.messages import Message, decode
from dynaq.core.partition import Partition
from dynaq.core.partitions import QueueState
from dynaq.errors import InvalidInput, NotServing
from dynaq.metrics import Metrics
from dynaq.services.catalog import Catalog, QueueInfo
from dynaq.services.queue_records import MAX_WAIT_S, check_visibility
from dynaq.services.queues.lane_probe import LaneProbe, probe_lane
from dynaq.services.queues.receive_budget import ReceiveBudget
from dynaq.services.queues.receive_request import ReceiveTake, StillWanted, always_wanted
from dynaq.services.queues.serve_expired import DEAD_LETTER_HOLD_S, serve_expired
from dynaq.services.queues.state import QueueStates
from dynaq.storage.base import Store
from dynaq.tasks import wait_event

log = logging.getLogger(__name__)

DeadLetterSink = Callable[[QueueInfo, QueueState, list[tuple[int, bytes]]], Awaitable[int]]
"""Moves messages a receive found over their queue's receive limit (they are held
invisible meanwhile); see :mod:`dynaq.services.queues.dead_letters`."""

_MAX_SCAN_PAGE = 4096
_MAX_EXAMINED = 8192
"""Rows one receive may walk in a partition (in-flight, or behind a busy group head):
the scan stops there and the next receive goes on from the cursor, so a long
blocked backlog costs each receive a bounded slice of the event loop."""
_MAINTAIN_EVERY_S = 1.0


class Receiver:
    """Serves visible messages of this node's slice and makes them invisible."""

    def __init__(
        self,
        store: Store,
        catalog: Catalog,
        view: MembershipView,
        clock: Clock,
        metrics: Metrics,
        states: QueueStates,
        max_batch: int,
        idle_rescan_s: float,
        *,
        max_receive_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._view = view
        self._clock = clock
        self._metrics = metrics
        self._states = states
        self._max_batch = max_batch
        self._idle_rescan_s = idle_rescan_s
        self.max_receive_bytes = max_receive_bytes
        """The bytes one receive may take (it always takes at least one message)."""
        self._message_bytes: dict[int, float] = {}
        """Per queue number: the mean size of the messages its last receive took."""
        self._last_maintained: dict[int, float] = {}
        self.dead_letter: DeadLetterSink | None = None
        self.in_ring = False
        """Set once the node has joined the ring; until then its view of its slice is wrong."""
        self.holding: Callable[[], bool] = lambda: False
        """Whether lanes this node just took still wait for their in-flight state
        (:mod:`.slice_handoff`): it serves nothing meanwhile."""
        self.draining = False

    def forget(self, number: int) -> None:
        self._last_maintained.pop(number, None)
        self._message_bytes.pop(number, None)

    def check_batch_size(self, n: int) -> None:
        if not 1 <= n <= self._max_batch:
            raise InvalidInput(f"batch size must be an integer in 1..{self._max_batch}")

    async def receive(
        self,
        queue: str,
        max_messages: int,
        visibility_timeout_s: float | None = None,
        wait_time_s: float = 0.0,
        wanted: StillWanted = always_wanted,
        per_group: int = 1,
        max_bytes: int | None = None,
    ) -> list[Message]:
        """Serve up to ``max_messages`` visible messages and make them invisible.

        Expired in-flight messages are served first, then partitions least
        recently used first. A receive stops once the messages it took pass
        ``max_bytes`` (default ``max_receive_bytes``; it always takes at least one);
        those it did not take stay visible, in their place. With ``wait_time_s`` >
        0 (long polling, at most 20 s) an empty receive waits until something may
        be visible or the time is up. Returns ``[]`` when nothing is visible. It
        takes up to ``per_group`` messages of one group, in order (see
        :mod:`.receive_request`). A long poll whose caller has gone (``wanted()``
        false) stops before it serves anything more: messages arriving after a
        client hung up stay visible for the next one.
        """
        self.check_batch_size(max_messages)
        if not self.in_ring:
            raise NotServing("this node is joining the ring; retry through another node")
        if visibility_timeout_s is not None:
            check_visibility(visibility_timeout_s)
        if not 0 <= wait_time_s <= MAX_WAIT_S:
            raise InvalidInput(f"wait time must be in 0..{MAX_WAIT_S:g} seconds")
        info = await self._catalog.queue(queue)
        vt = visibility_timeout_s
        if vt is None:
            vt = info.settings.visibility_timeout_s
        give_up = self._clock.monotonic() + wait_time_s
        budget = self.max_receive_bytes if max_bytes is None else max_bytes
        out: list[Message] = []
        while not self.draining:  # a draining node handed its in-flight messages over
            st = self._states.state(info)
            st.signal.clear()
            held = self.holding()
            args = (max_messages, vt, per_group, budget)
            out = [] if held else await self._receive_once(info, st, *args)
            left = give_up - self._clock.monotonic()
            if out or left <= 0:
                break
            if st.walk_cut and not held:
                # The last scan stopped at its row budget with more ahead: go
                # on at once (after letting others run) rather than wait.
                st.walk_cut = False
                await asyncio.sleep(0)
                continue
            pause = min(left, 0.1 if held else max(0.05, self._idle_rescan_s))
            nxt = st.next_deadline()
            if nxt is not None:
                pause = min(pause, max(0.0, nxt - self._clock.monotonic()) + 0.001)
            await wait_event(st.signal, self._clock, pause)
            if not wanted():
                break
            info = await self._catalog.queue(queue)
        if out:
            self._metrics.incr(f"{info.name}.received.count", len(out))
        return out

    async def visibility_of(self, queue: str, visibility_timeout_s: float | None) -> float:
        """The visibility timeout a receive of ``queue`` applies."""
        if visibility_timeout_s is not None:
            return visibility_timeout_s
        return (await self._catalog.queue(queue)).settings.visibility_timeout_s

    async def watch(self, queue: str, wait_s: float) -> bool:
        """Wait up to ``wait_s`` until this node's slice of ``queue`` may have a visible
        message (an enqueue landed in it, one was released, an in-flight message's
        visibility ran out); serve nothing. True if it may."""
        info = await self._catalog.queue(queue)
        st = self._states.state(info)
        if st.signal.is_set() or self.draining:
            return True
        pause = wait_s
        nxt = st.next_deadline()
        if nxt is not None:
            pause = min(pause, max(0.0, nxt - self._clock.monotonic()) + 0.001)
        if await wait_event(st.signal, self._clock, pause):
            return True
        return nxt is not None and nxt <= self._clock.monotonic()

    async def _receive_once(
        self, info: QueueInfo, st: QueueState, n: int, vt: float, per_group: int, max_bytes: int
    ) -> list[Message]:
        now = self._clock.monotonic()
        self._maintain(info, st, now)
        rp = info.settings.redrive_policy
        limit = None if rp is None or self.dead_letter is None else rp.max_receive_count
        doomed: list[tuple[int, bytes]] = []
        budget = ReceiveBudget(max_bytes, self._message_bytes.get(info.number, 0.0))
        take = ReceiveTake(per_group)
        out = await self._receive_now(info, st, n, vt, limit, doomed, budget, take)
        if budget.count:
            self._message_bytes[info.number] = budget.mean
        if doomed and self.dead_letter is not None:
            # A receive cancelled before this leaves them held: the hold runs
            # out and the next receive chooses them again.
            await self.dead_letter(info, st, doomed)
        now = self._clock.monotonic()
        if st.all_locked(now) and st.split(now, info.settings.max_partitions):
            log.debug("partition split", extra={"queue": info.name, "partitions": st.count})
        return out

    async def _receive_now(
        self,
        info: QueueInfo,
        st: QueueState,
        max_messages: int,
        vt: float,
        limit: int | None,
        doomed: list[tuple[int, bytes]],
        budget: ReceiveBudget,
        take: ReceiveTake,
    ) -> list[Message]:
        # With a visibility timeout of 0 a message just served is visible again to the
        # scans below: one receive serves (and counts) each message once (``take``).
        out = await serve_expired(
            self._store,
            self._clock,
            info,
            st,
            max_messages,
            vt,
            limit,
            doomed,
            budget,
            take,
            serving=lambda: not self.draining,
        )
        busy: list[Partition] = []
        for p in st.serving_order(self._clock.monotonic(), self._idle_rescan_s):
            if len(out) >= max_messages or budget.spent:
                break
            if p.lock.locked():
                busy.append(p)
                continue
            async with p.lock:
                out.extend(
                    await self._scan_partition(
                        info, st, p, max_messages - len(out), vt, limit, doomed, budget, take
                    )
                )
        if not out and busy:
            # Every partition with work is being scanned by another receive:
            # queue behind the least recently used one rather than answer empty.
            p = busy[0]
            async with p.lock:
                out.extend(
                    await self._scan_partition(
                        info, st, p, max_messages, vt, limit, doomed, budget, take
                    )
                )
        return out

    def _maintain(self, info: QueueInfo, st: QueueState, now: float) -> None:
        """Lazy, bounded partition upkeep on the read path: at most once a second
        per queue, cut to the configured count or merge partitions gone stale."""
        if now - self._last_maintained.get(info.number, float("-inf")) < _MAINTAIN_EVERY_S:
            return
        self._last_maintained[info.number] = now
        s = info.settings
        target = min(max(st.count, s.min_partitions), s.max_partitions)
        if target != st.count:
            st.relayout(self._view.my_slice, target, now)
        elif st.merge_stale(now, s.min_partitions, s.max_partition_age_s):
            log.debug("partition merged", extra={"queue": info.name, "partitions": st.count})

    async def _scan_partition(
        self,
        info: QueueInfo,
        st: QueueState,
        p: Partition,
        want: int,
        vt: float,
        limit: int | None,
        doomed: list[tuple[int, bytes]],
        budget: ReceiveBudget,
        take: ReceiveTake,
    ) -> list[Message]:
        """Serve up to ``want`` visible messages of ``p`` but those ``take`` holds."""
        bottom, top = p.lanes.bottom_id, p.lanes.top_id + 1
        wakes = p.wakes  # a wake-up during this scan must not be lost to idling
        start = first_start = p.take_start()
        end = top
        from_bottom = start == bottom
        out: list[Message] = []
        blocked: set[str] = set()
        page = examined = 0
        while True:
            # First page: exactly what is wanted (most scans skip nothing);
            # pages after skips grow, so long in-flight runs cost few reads.
            page_size = min(_MAX_SCAN_PAGE, want - len(out) if page == 0 else 2 * want + 64)
            # Rows are read whole: no more of them than the budget should take.
            page_size = budget.rows(page_size)
            page += 1
            # Per group: the last message of it this page served (or found already
            # served by this receive); only its very next one may join the run.
            run: dict[str, int] = {}
            token = st.begin_read()
            try:
                rows = await self._store.scan(
                    keys.message(info.number, start), keys.message(info.number, end), page_size
                )
                if self.draining:
                    return out  # its in-flight table was handed over: nothing more is served
                # The page's first lane, when the page starts inside it: a group message
                # found there is served only once a read begun after this page (a probe)
                # shows no earlier message of its group before the page (see :mod:`.lane_probe`).
                partial = lane_of(start) if start != lane_start(lane_of(start)) else None
                probe: LaneProbe | None = None
                now, wall_ms = self._clock.monotonic(), self._clock.wall_ms()
                # The ring may have changed during the read: lanes that moved away are
                # the new owner's now (it holds their in-flight state), never served here.
                whole = st.slice.lo <= p.lanes.lo and p.lanes.hi <= st.slice.hi
                last = start
                for k, v in rows:
                    last = keys.message_id(k)
                    p.pass_count += 1
                    if not whole and lane_of(last) not in st.slice:
                        continue
                    if st.deleted_since(last, token):
                        continue
                    f = st.inflight.get(last)
                    if f is not None and (f.deadline > now or last in take.ids):
                        if f.group is not None:
                            if last in take.ids:
                                run[f.group] = last
                            else:
                                blocked.add(f.group)
                        continue
                    if f is not None and limit is not None and f.receive_count >= limit:
                        st.hold(last, now, DEAD_LETTER_HOLD_S)
                        doomed.append((last, v))
                        continue
                    msg = decode(last, v)
                    g = msg.group
                    if g is not None and (
                        g in blocked
                        or (g in take.by_group and (g not in run or take.group_full(g)))
                        or st.group_blocked(g, last, now, take.ids)
                    ):
                        blocked.add(g)  # later messages of the group wait their turn
                        continue
                    if g is not None and partial is not None and lane_of(last) == partial:
                        if probe is None:
                            probe = await probe_lane(self._store, info.number, st, partial, start)
                            examined += probe.rows
                            now = self._clock.monotonic()
                            if (
                                st.deleted_since(last, token)
                                or st.is_invisible(last, now)
                                or lane_of(last) not in st.slice
                                or self.draining
                            ):
                                continue  # changed while the probe read
                        if probe.blocks(g):
                            # Not added to ``blocked``: the wrap-around below (or
                            # the next scan, rewound) serves the earlier one first.
                            p.rewind_to(lane_start(partial))
                            continue
                    f = st.mark_served(last, now, vt, g, msg.attributes, wall_ms)
                    msg.receive_count, msg.delivery = f.receive_count, f.delivery
                    msg.first_received_ms = f.first_received_ms
                    out.append(msg)
                    if g is not None:
                        take.took(last, g)
                        run[g] = last
                    elif vt <= 0:
                        take.took(last, None)  # visible again at once: not twice here
                    budget.take(len(v))
                    if len(out) >= want or budget.spent:
                        break
            finally:
                st.end_read(token)
            if len(out) >= want or budget.spent:
                p.cursor = last + 1 if last + 1 < top else None
                break
            examined += len(rows)
            if len(rows) == page_size and examined >= _MAX_EXAMINED:
                p.cursor = last + 1 if last + 1 < top else None
                p.wake()  # not idle: the rest of the pass is still ahead
                st.walk_cut = True
                break
            if len(rows) == page_size:
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
