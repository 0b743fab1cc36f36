"""Per-queue serving state on the node that owns a slice: partitions and in-flight messages.

Pure state, no I/O: the queue service reads and updates it around its store
calls. What it models:

* **Partitions** cut this node's slice of a queue into lane ranges, served
  least-recently-used first. A partition that served a batch is *locked* for
  the visibility timeout, as in Dynamiq, but the lock only orders partitions
  and drives splitting: dynaq tracks the in-flight messages themselves, so a
  locked partition still serves its other, never-served messages instead of
  hiding them for the whole timeout.
* **In-flight messages** (id → deadline, receive count) and a deadline heap,
  so an expired message becomes visible again without rescanning anything,
  and a single message's visibility can be extended or released.
* A **scan cursor** per partition so receives do not rescan the in-flight
  prefix; it wraps at the partition's end. A partition whose full pass found
  nothing is *idle* and is not scanned again until an enqueue touches its
  lanes, or ``idle_rescan_s`` passes (other nodes may write into it).
* The **deletes racing store reads**, so a read's snapshot never serves a
  message deleted meanwhile (kept in a :class:`~dynaq.core.delete_record.DeleteRecord`).

In-flight state lives in this node's memory only. If the node dies, the new
owner of the slice serves those messages again at once: at-least-once, with
duplicates, never loss.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet

from dynaq.core.delete_record import DeleteRecord
from dynaq.core.hints import HandoverEntry
from dynaq.core.ids import LANE_SHIFT, lane_of
from dynaq.core.inflight import InFlight, next_delivery
from dynaq.core.keyspace import LaneRange, partition_ranges
from dynaq.core.partition import Partition

_heappush = heapq.heappush


class QueueState:
    """Everything one node knows about serving one queue."""

    def __init__(self, slice_: LaneRange, count: int, now: float) -> None:
        self.inflight: dict[int, InFlight] = {}
        # group -> its messages in flight (served, not deleted): one, or those one
        # receive took together in order (SQS FIFO receives)
        self.group_inflight: dict[str, set[int]] = {}
        # Set whenever something may have become visible; long polls wait on it.
        self.signal = asyncio.Event()
        # Deletes that land while a store read is in flight: that read's
        # snapshot may still hold the deleted message, which must not be served.
        self._reads = DeleteRecord()
        self._heap: list[tuple[float, int]] = []
        self.partitions: list[Partition] = []
        self._starts: list[int] = []
        self.walk_cut = False
        """A scan stopped at its row budget with rows ahead (a long poll goes on at once)."""
        self.slice = slice_
        self.relayout(slice_, count, now)

    # layout ------------------------------------------------------------

    def relayout(self, slice_: LaneRange, count: int, now: float) -> None:
        """Recut the slice into ``count`` partitions; cursors restart, in-flight state stays.

        When the slice moves, every in-flight entry is back on the deadline heap: an
        expired entry of a lane that was not this node's came off it unserved (its
        owner serves it), and without this it would never expire here once its lane
        is this node's, holding its group back for good."""
        if slice_ != self.slice:
            self._rebuild_heap()
        self.slice = slice_
        old = {(p.lanes.lo, p.lanes.hi): p for p in self.partitions}
        parts: list[Partition] = []
        for rng in partition_ranges(slice_, count):
            prev = old.get((rng.lo, rng.hi))
            parts.append(prev if prev is not None else Partition(rng, created_at=now))
        self.partitions = parts
        self._starts = [p.lanes.lo for p in parts]

    @property
    def count(self) -> int:
        return len(self.partitions)

    def partition_of_lane(self, lane: int) -> Partition | None:
        if lane not in self.slice:
            return None
        i = bisect.bisect_right(self._starts, lane) - 1
        return self.partitions[i]

    def note_enqueued(self, lane: int) -> None:
        """A message was written into ``lane``: its partition may have work again."""
        p = self.partition_of_lane(lane)
        if p is not None:
            p.wake()
        self.signal.set()

    def note_group_written(self, message_id: int) -> None:
        """A group message was written. If it landed behind its partition's scan
        cursor (its id was drawn before, and committed after, a larger id in its
        lane that a scan already passed), the next scan restarts at the start of
        its lane: found only when the scan wrapped around, its group's later
        messages ahead of the cursor would be served first. Not at the message
        itself: earlier messages of its group may wait behind the cursor too
        (skipped while their group was blocked), and a group lives in one lane.
        A scan in progress (its lock held) may have read the lane before this
        write and be about to move its cursor past it: rewind then too."""
        p = self.partition_of_lane(lane_of(message_id))
        if p is None:
            return
        if p.lock.locked() or (p.cursor is not None and message_id < p.cursor):
            p.rewind_to(max(p.lanes.bottom_id, lane_of(message_id) << LANE_SHIFT))
        self.signal.set()

    def poke(self, lane: int) -> None:
        """Something in ``lane`` became visible (released): wake its partition and waiters."""
        self.note_enqueued(lane)

    def next_deadline(self) -> float | None:
        """The earliest in-flight deadline (may be stale), for long polls to wake at."""
        return self._heap[0][0] if self._heap else None

    def serving_order(self, now: float, idle_rescan_s: float) -> list[Partition]:
        """Partitions worth scanning, least recently used first."""
        due = [p for p in self.partitions if p.due(now, idle_rescan_s)]
        due.sort(key=lambda p: p.last_used)
        return due

    def all_locked(self, now: float) -> bool:
        return all(p.locked_until > now for p in self.partitions)

    def split(self, now: float, max_partitions: int) -> bool:
        """Add one partition (when every partition is locked); return whether it did."""
        if self.count >= min(max_partitions, self.slice.width):
            return False
        self.relayout(self.slice, self.count + 1, now)
        return True

    def merge_stale(self, now: float, min_partitions: int, max_age_s: float) -> bool:
        """Drop one partition unused for ``max_age_s`` (keeping ``min_partitions``)."""
        if self.count <= min_partitions:
            return False
        for p in self.partitions:
            if now - max(p.last_used, p.created_at) > max_age_s:
                self.relayout(self.slice, self.count - 1, now)
                return True
        return False

    # reads racing deletes (see :class:`DeleteRecord`) -------------------

    def begin_read(self) -> int:
        """Call before a store read whose rows may be served; returns a token. Check
        rows with :meth:`deleted_since` before awaiting anything after :meth:`end_read`."""
        return self._reads.begin_read()

    def end_read(self, token: int) -> None:
        self._reads.end_read(token)

    def note_deleted(self, message_ids: Iterable[int]) -> None:
        self._reads.note_deleted(message_ids)

    def deleted_since(self, message_id: int, token: int) -> bool:
        """Whether ``message_id`` was deleted after the read holding ``token`` began."""
        return self._reads.deleted_since(message_id, token)

    @property
    def _deleted(self) -> dict[int, int]:
        """The deletes still remembered (a test checks the record stays small)."""
        return self._reads.deleted

    # in-flight ----------------------------------------------------------

    def is_invisible(self, message_id: int, now: float) -> bool:
        f = self.inflight.get(message_id)
        return f is not None and f.deadline > now

    def mark_served(
        self,
        message_id: int,
        now: float,
        visibility_s: float,
        group: str | None = None,
        attributes: dict[str, str] | None = None,
        wall_ms: int = 0,
    ) -> InFlight:
        # Runs once per served message: the lane and the deadline push are
        # inlined (lane_of, _push_deadline), which saves a third of its time.
        inflight = self.inflight
        f = inflight.get(message_id)
        deadline = now + visibility_s
        if f is None:
            f = inflight[message_id] = InFlight(
                deadline, 1, message_id >> LANE_SHIFT, group, attributes, next_delivery()
            )
            f.first_received_ms = wall_ms
            if group is not None:
                members = self.group_inflight.get(group)
                if members is None:
                    self.group_inflight[group] = {message_id}
                else:
                    members.add(message_id)
        else:
            f.deadline = deadline
            f.receive_count += 1
            f.delivery = next_delivery()
            f.claimed = False
        heap = self._heap
        _heappush(heap, (deadline, message_id))
        if len(heap) > 2 * len(inflight) + 64:
            self._rebuild_heap()
        return f

    def adopt(self, e: HandoverEntry, now: float, seconds_left: float) -> None:
        """Hold ``e``, handed over by another node, in flight for ``seconds_left``: its
        receive count and delivery number go with it (receipts it handed out work)."""
        f = self.mark_served(e.message_id, now, seconds_left, e.group, e.attributes)
        f.receive_count, f.delivery = max(1, e.receive_count), e.delivery

    def is_stale(self, message_id: int, delivery: int) -> bool:
        """Whether a receipt for ``delivery`` names an earlier delivery than the latest
        (the message was served again since). A message not in flight here, or one
        whose delivery is unknown (handed over), has no later delivery to protect."""
        f = self.inflight.get(message_id)
        return f is not None and f.delivery != 0 and f.delivery != delivery

    def is_current(self, message_id: int, delivery: int, now: float) -> bool:
        """Whether ``delivery`` is the message's live delivery here and free to claim: in
        flight under that very delivery, its visibility not run out, not claimed by a
        transaction. Stricter than :meth:`is_stale`: a transaction commits only on
        deliveries nobody else can be holding, so an entry handed over by a leaving
        node (its delivery unknown, its claim not carried) is not current."""
        f = self.inflight.get(message_id)
        return f is not None and f.deadline > now and f.delivery == delivery and not f.claimed

    def is_claimed(self, message_id: int, delivery: int, now: float) -> bool:
        """Whether a transaction has claimed ``delivery`` and may still commit it."""
        f = self.inflight.get(message_id)
        return f is not None and f.claimed and f.delivery == delivery and f.deadline > now

    def claim(self, message_id: int, now: float, seconds: float) -> None:
        """Claim a current delivery for a transaction and keep it invisible for at least
        ``seconds`` more (never shortens its visibility)."""
        f = self.inflight.get(message_id)
        if f is None:
            return
        f.claimed = True
        f.unclaimed_deadline = f.deadline
        if f.deadline < now + seconds:
            f.deadline = now + seconds
            self._push_deadline(f.deadline, message_id)

    def release_claim(self, message_id: int, delivery: int) -> None:
        """A claiming transaction did not commit: the delivery may be claimed again, and
        its visibility is what it was before the claim (visible at once if that ran
        out meanwhile)."""
        f = self.inflight.get(message_id)
        if f is None or not f.claimed or f.delivery != delivery:
            return
        f.claimed = False
        if f.deadline != f.unclaimed_deadline:
            f.deadline = f.unclaimed_deadline
            self._push_deadline(f.deadline, message_id)
            self.signal.set()  # it may be visible now: wake a long poll

    def _push_deadline(self, deadline: float, message_id: int) -> None:
        """Track a deadline; rebuild the heap once stale entries (from deletes and
        extensions) outnumber live ones, so it stays O(in flight), amortized O(1)."""
        heap = self._heap
        heapq.heappush(heap, (deadline, message_id))
        if len(heap) > 2 * len(self.inflight) + 64:
            self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        self._heap = [(f.deadline, m) for m, f in self.inflight.items()]
        heapq.heapify(self._heap)

    def group_blocked(
        self, group: str, message_id: int, now: float, taken: AbstractSet[int] = frozenset()
    ) -> bool:
        """Whether ``message_id`` must wait for another message of its group in
        flight: one still invisible, or an earlier one (served again first). Those
        in ``taken`` (served by the asking receive, in order) do not count."""
        members = self.group_inflight.get(group)
        if not members:
            return False
        inflight = self.inflight
        return any(
            m != message_id and m not in taken and (m < message_id or inflight[m].deadline > now)
            for m in members
        )

    def _group_forget(self, group: str, message_id: int) -> bool:
        """Drop ``message_id`` from its group's in-flight set; True if it was there."""
        members = self.group_inflight.get(group)
        if members is None or message_id not in members:
            return False
        members.discard(message_id)
        if not members:
            del self.group_inflight[group]
        return True

    def forget_all(self, message_ids: Iterable[int]) -> None:
        """:meth:`forget` each of ``message_ids`` (deletes of a whole request)."""
        inflight = self.inflight
        for i in message_ids:
            f = inflight.get(i)
            if f is None:
                continue
            if f.group is None:
                del inflight[i]  # all that forget does for a message without a group
            else:
                self.forget(i)

    def forget(self, message_id: int) -> bool:
        """The message was deleted; return whether it was in flight.

        Deleting a group's message may unblock the group: its partition rewinds
        so the next message of the group (a larger id) is found by the next scan.
        """
        f = self.inflight.pop(message_id, None)
        if f is None:
            return False
        if f.group is not None and self._group_forget(f.group, message_id):
            p = self.partition_of_lane(f.lane)
            if p is not None:
                p.rewind_to(message_id + 1)
            self.signal.set()
        return True

    def set_visibility(self, message_id: int, now: float, visibility_s: float) -> bool:
        """Extend (or, with 0, release) an in-flight message; False if it is not in flight."""
        f = self.inflight.get(message_id)
        if f is None or f.deadline <= now:
            return False
        f.deadline = now + visibility_s
        self._push_deadline(f.deadline, message_id)
        return True

    def hold(self, message_id: int, now: float, seconds: float) -> None:
        """Keep an in-flight message invisible for ``seconds`` without counting a
        receive (it is being moved to a dead-letter queue)."""
        f = self.inflight.get(message_id)
        if f is not None:
            f.deadline = now + seconds
            self._push_deadline(f.deadline, message_id)

    def end_hold(self, message_id: int, deadline: float, held_until: float) -> None:
        """A hold that ended without the delete it was for: the message is back to
        ``deadline`` (visible at once if that has passed), unless it was served,
        changed or held again since (its deadline is no longer ``held_until``)."""
        f = self.inflight.get(message_id)
        if f is None or f.deadline != held_until:
            return
        f.deadline = deadline
        self._push_deadline(deadline, message_id)
        self.signal.set()  # it may be visible now: wake a long poll

    def expired(self, now: float, limit: int) -> Iterator[int]:
        """Ids whose visibility ran out, oldest deadline first, at most ``limit``.

        They stay in :attr:`inflight` (with their receive count) until served
        again or deleted; stale heap entries are skipped.
        """
        n = 0
        heap = self._heap
        while heap and n < limit and heap[0][0] <= now:
            deadline, mid = heapq.heappop(heap)
            f = self.inflight.get(mid)
            if f is None or f.deadline != deadline:
                continue
            n += 1
            yield mid

    def requeue_expired(self, message_ids: list[int]) -> None:
        """Put back ids taken by :meth:`expired` that were not served after all."""
        for mid in message_ids:
            f = self.inflight.get(mid)
            if f is not None:
                heapq.heappush(self._heap, (f.deadline, mid))

    def drop_outside(self, slice_: LaneRange) -> None:
        """Forget in-flight messages whose lanes moved to another node."""
        for mid in [m for m, f in self.inflight.items() if f.lane not in slice_]:
            f = self.inflight.pop(mid)
            if f.group is not None:
                self._group_forget(f.group, mid)
