"""Partition serving: LRU order, split when all are locked, merge when stale, in-flight tracking."""

from __future__ import annotations

import itertools

from dynaq.clock import ManualClock
from dynaq.core.ids import LANE_SHIFT, IdGenerator, lane_of
from dynaq.core.keyspace import FULL_RANGE, LaneRange, partition_ranges, slices
from dynaq.core.messages import NewMessage
from dynaq.core.partitions import QueueState
from dynaq.node import Node


def test_slices_tile_the_keyspace() -> None:
    for n in range(1, 40):
        names = [f"node-{i:02d}" for i in range(n)]
        s = sorted(slices(names).values(), key=lambda r: r.lo)
        assert s[0].lo == 0 and s[-1].hi == FULL_RANGE.hi
        assert all(a.hi == b.lo for a, b in itertools.pairwise(s))
        assert all(r.width >= 1 for r in s)


def test_partition_ranges_cover_slice_without_overlap() -> None:
    sl = LaneRange(100, 437)
    for count in (1, 2, 7, 336, 337, 1000):
        parts = partition_ranges(sl, count)
        assert parts[0].lo == 100 and parts[-1].hi == 437
        assert all(a.hi == b.lo for a, b in itertools.pairwise(parts))
        assert len(parts) == min(count, sl.width)


def test_ids_append_within_a_lane_and_stay_unique() -> None:
    clock = ManualClock()
    gen = IdGenerator(clock, writer=3, stride=100)
    seen: list[int] = []
    for _ in range(50):
        lane = gen.next_lane(10)
        ids = list(gen.allocate(lane, 10))
        assert all(lane_of(i) == lane for i in ids)
        assert ids == sorted(ids)
        assert all(i & 31 == 3 for i in ids)
        seen.extend(ids)
    assert len(set(seen)) == len(seen)
    assert all(0 <= i < 2**63 for i in seen)
    # a stalled wall clock still yields increasing ids in a lane
    a = gen.allocate(5, 300)
    b = gen.allocate(5, 1)
    assert b[0] > a[-1]


def test_split_and_merge_rules() -> None:
    st = QueueState(FULL_RANGE, 1, now=0.0)
    st.partitions[0].locked_until = 10.0
    assert st.all_locked(5.0)
    assert st.split(5.0, max_partitions=2)
    assert st.count == 2
    assert not st.split(5.0, max_partitions=2)  # capped by max_partitions
    assert st.merge_stale(5.0 + 100, min_partitions=1, max_age_s=50)
    assert st.count == 1
    assert not st.merge_stale(1000.0, min_partitions=1, max_age_s=50)  # min kept


def test_expired_heap_skips_stale_entries() -> None:
    st = QueueState(FULL_RANGE, 1, now=0.0)
    st.mark_served(1 << LANE_SHIFT, now=0.0, visibility_s=5)
    st.mark_served(2 << LANE_SHIFT, now=0.0, visibility_s=5)
    st.set_visibility(1 << LANE_SHIFT, now=1.0, visibility_s=100)  # extended
    st.forget(2 << LANE_SHIFT)  # deleted
    assert list(st.expired(now=6.0, limit=10)) == []
    assert list(st.expired(now=200.0, limit=10)) == [1 << LANE_SHIFT]


async def test_locked_partition_still_serves_unserved_messages(node: Node) -> None:
    """Dynaq's improvement over Dynamiq: a lock never hides never-served messages."""
    await node.catalog.create_queue("q")
    await node.catalog.update_queue("q", {"max_partitions": 1})
    ids = await node.queues.enqueue("q", [NewMessage(b"%d" % i) for i in range(30)])
    first = await node.queues.receive("q", 10)
    second = await node.queues.receive("q", 10)  # same, locked partition
    third = await node.queues.receive("q", 10)
    got = [m.id for m in first + second + third]
    assert sorted(got) == sorted(ids) and len(set(got)) == 30
    assert await node.queues.receive("q", 10) == []


async def test_partition_split_and_merge_through_service(node: Node, clock: ManualClock) -> None:
    await node.catalog.create_queue("q")
    await node.catalog.update_queue("q", {"max_partitions": 3, "max_partition_age_s": 60.0})
    info = await node.catalog.queue("q")
    node.queues.writer.ids._stride = node.queues.writer.ids._left_in_lane = 1  # spread over lanes
    for _ in range(100):
        await node.queues.enqueue("q", [NewMessage(b"x")])
    counts = []
    for _ in range(5):
        await node.queues.receive("q", 1)
        counts.append(node.queues.partition_count(info))
    assert counts[-1] == 3  # split while every partition was locked, capped at max
    clock.advance(3600)
    for _ in range(3):
        clock.advance(2)
        await node.queues.receive("q", 1)
    assert node.queues.partition_count(info) < 3  # stale partitions merged away


async def test_no_message_served_twice_while_in_flight(node: Node) -> None:
    import asyncio

    await node.catalog.create_queue("q")
    ids = []
    for _ in range(20):
        ids += await node.queues.enqueue("q", [NewMessage(b"m") for _ in range(50)])
    got: list[int] = []

    async def consumer() -> None:
        while True:
            batch = await node.queues.receive("q", 7)
            if not batch:
                return
            got.extend(m.id for m in batch)

    await asyncio.gather(*(consumer() for _ in range(8)))
    assert len(got) == len(set(got)) == 1000
    assert set(got) == set(ids)


def test_delete_record_stays_small_under_overlapping_reads() -> None:
    """Deletes racing reads are remembered only while an older read is in flight."""
    st = QueueState(FULL_RANGE, 1, now=0.0)
    t1 = st.begin_read()
    st.note_deleted([1, 2])
    assert st.deleted_since(1, t1)
    for i in range(1000):  # reads always overlap, as under sustained load
        t2 = st.begin_read()
        st.end_read(t1)
        st.note_deleted([100 + i])
        t1 = t2
    assert len(st._deleted) <= 2
    assert st.deleted_since(1099, t1)
    st.end_read(t1)
    st.begin_read()
    assert not st._deleted


def test_deadline_heap_stays_proportional_to_what_is_in_flight() -> None:
    """Receives, extensions and deletes leave stale heap entries; the heap is rebuilt
    before they outnumber the live ones (it once grew by one entry per receive)."""
    st = QueueState(LaneRange(0, 1024), 1, 0.0)
    for i in range(100_000):
        st.mark_served(i, 0.0, 30.0)
        st.set_visibility(i, 0.0, 60.0)
        st.forget(i)
    assert not st.inflight
    assert len(st._heap) <= 64 + 2


def test_a_revoked_writer_draws_no_more_ids() -> None:
    from dynaq.errors import SlotLost

    ids = IdGenerator(ManualClock(), writer=3)
    ids.allocate(0, 1)
    ids.revoke()
    try:
        ids.allocate(0, 1)
        raise AssertionError("expected SlotLost")
    except SlotLost as exc:
        assert exc.status == 503


def test_a_transaction_claims_a_current_delivery_exclusively() -> None:
    st = QueueState(FULL_RANGE, 1, now=0.0)
    mid = 3 << LANE_SHIFT
    first = st.mark_served(mid, now=0.0, visibility_s=5).delivery
    assert st.is_current(mid, first, now=1.0)
    assert not st.is_current(mid, first + 1, now=1.0)  # a receipt no delivery handed out
    st.claim(mid, now=1.0, seconds=30)
    assert not st.is_current(mid, first, now=2.0)  # claimed: a second transaction is refused
    assert list(st.expired(now=6.0, limit=10)) == []  # and it is held past its visibility
    st.release_claim(mid, first + 1)  # not that delivery's: nothing happens
    assert not st.is_current(mid, first, now=2.0)
    st.release_claim(mid, first)
    assert st.is_current(mid, first, now=2.0)
    assert list(st.expired(now=6.0, limit=10)) == [mid]  # its own visibility again
    assert not st.is_current(mid, first, now=6.0)
    st.requeue_expired([mid])
    st.claim(mid, now=2.0, seconds=30)
    again = st.mark_served(mid, now=40.0, visibility_s=5).delivery  # served again
    assert not st.is_current(mid, first, now=41.0)
    assert st.is_current(mid, again, now=41.0)  # a new delivery starts unclaimed
    st.forget(mid)
    assert not st.is_current(mid, again, now=41.0)  # deleted


async def test_changed_partition_limits_apply_at_once(node: Node) -> None:
    """An operator who lowers or raises the limits sees the count follow them in the
    queue's description at once, not after the next receive."""
    await node.catalog.create_queue("q", {"min_partitions": 5, "max_partitions": 8})
    info = await node.catalog.queue("q")
    await node.queues.receive("q", 1)
    assert node.queues.partition_count(info) == 5
    info = await node.catalog.update_queue("q", {"min_partitions": 1, "max_partitions": 1})
    assert node.queues.partition_count(info) == 1
    info = await node.catalog.update_queue("q", {"min_partitions": 7, "max_partitions": 9})
    assert node.queues.partition_count(info) == 7


def test_an_expired_entry_of_a_lane_not_served_here_expires_once_the_lane_is() -> None:
    """An entry of a lane outside the slice comes off the deadline heap unserved (its
    owner serves it); once the slice takes its lane, it expires here again."""
    st = QueueState(LaneRange(0, 512), 1, 0.0)
    mid = 700 << LANE_SHIFT
    st.mark_served(mid, 0.0, 1.0, group="g")
    taken = list(st.expired(5.0, 10))
    assert taken == [mid]
    assert [m for m in taken if lane_of(m) in st.slice] == []  # left to its owner
    st.relayout(LaneRange(0, 1024), 1, 5.0)
    assert list(st.expired(6.0, 10)) == [mid]
