"""CasLease on a memory store and a manual clock: expiry, takeover, fencing, the stored format."""

from __future__ import annotations

import json

import msgpack
import pytest

from dynaq.clock import ManualClock
from dynaq.core.leases import CasLease, LeaseRecord, LeaseState, decode_record, encode_record
from dynaq.storage.memory import MemoryStore

KEY = b"t/lease"
LEASE_S = 30.0


def _lease(store: MemoryStore, clock: ManualClock, holder: str) -> CasLease:
    return CasLease(store, KEY, holder, clock, LEASE_S)


async def test_a_free_lease_is_taken_once_and_then_held() -> None:
    store, clock = MemoryStore(), ManualClock()
    a, b = _lease(store, clock, "a"), _lease(store, clock, "b")
    assert a.state(await store.get(KEY)) is LeaseState.FREE
    assert await a.acquire() is True and a.held
    assert await b.acquire() is False and not b.held
    assert b.state(await store.get(KEY)) is LeaseState.HELD
    assert a.state(await store.get(KEY)) is LeaseState.MINE


async def test_a_lease_lapses_after_lease_s_without_a_write() -> None:
    store, clock = MemoryStore(), ManualClock()
    a, b = _lease(store, clock, "a"), _lease(store, clock, "b")
    assert await a.acquire()
    clock.advance(LEASE_S)  # exactly lease_s: still valid through its last millisecond
    assert await b.acquire() is False
    clock.advance(0.001)
    assert await b.acquire() is True


async def test_refresh_keeps_the_lease_alive() -> None:
    store, clock = MemoryStore(), ManualClock()
    a, b = _lease(store, clock, "a"), _lease(store, clock, "b")
    assert await a.acquire()
    for _ in range(5):
        clock.advance(LEASE_S / 2)
        assert await a.refresh() is True
        assert await b.acquire() is False


async def test_a_stale_holder_is_fenced_after_a_takeover() -> None:
    store, clock = MemoryStore(), ManualClock()
    a, b = _lease(store, clock, "a"), _lease(store, clock, "b")
    assert await a.acquire()
    clock.advance(LEASE_S + 1)  # a was cut off longer than the lease
    assert await b.acquire() is True
    assert await a.refresh() is False and not a.held
    assert await a.refresh() is False  # stays lost; it must acquire again
    assert await a.release() is False  # and cannot release b's lease
    assert b.state(await store.get(KEY)) is LeaseState.MINE
    assert await b.refresh() is True


async def test_only_one_of_two_racing_takers_wins() -> None:
    store, clock = MemoryStore(), ManualClock()
    a, b = _lease(store, clock, "a"), _lease(store, clock, "b")
    assert await _lease(store, clock, "old").acquire()
    clock.advance(LEASE_S + 1)
    seen = await store.get(KEY)  # both read the lapsed record, then both try to take it
    assert [await a.take(seen), await b.take(seen)] == [True, False]
    assert a.held and not b.held


async def test_a_restarted_holder_takes_its_own_lease_at_once() -> None:
    store, clock = MemoryStore(), ManualClock()
    assert await _lease(store, clock, "a").acquire()
    again = _lease(store, clock, "a")  # same name, new process: no version in hand
    assert await again.refresh() is False
    assert await again.acquire() is True


async def test_a_live_holder_never_lapses() -> None:
    store, clock = MemoryStore(), ManualClock()
    a, b = _lease(store, clock, "a"), _lease(store, clock, "b")
    assert await a.acquire()
    clock.advance(LEASE_S * 10)
    assert await b.acquire(live={"a"}) is False
    assert await b.acquire(live={"c"}) is True


async def test_release_lets_another_holder_in_at_once() -> None:
    store, clock = MemoryStore(), ManualClock()
    a, b = _lease(store, clock, "a"), _lease(store, clock, "b")
    assert await a.acquire()
    assert await a.release() is True and not a.held
    assert await b.acquire() is True
    assert await a.acquire() is False


async def test_an_unreadable_record_counts_as_lapsed() -> None:
    store, clock = MemoryStore(), ManualClock()
    await store.put_if_absent(KEY, b"\xc1 not a lease")
    a = _lease(store, clock, "a")
    assert a.state(await store.get(KEY)) is LeaseState.LAPSED
    assert await a.acquire() is True


async def test_the_stored_record_is_the_writer_slot_json() -> None:
    """The format writer slots have always stored: older nodes read it unchanged."""
    store, clock = MemoryStore(), ManualClock()
    assert await _lease(store, clock, "a").acquire()
    item = await store.get(KEY)
    assert item is not None
    assert json.loads(item.value) == {"name": "a", "heartbeat_ms": clock.wall_ms()}
    assert decode_record(encode_record(LeaseRecord("n", 5))) == LeaseRecord("n", 5)


async def test_the_batch_reaper_is_fenced_by_its_lease() -> None:
    """Two batch services that both think they reap: one lease, lapsing after 3 intervals."""
    from dynaq.core.keys import BATCH_REAPER_LEASE
    from dynaq.core.membership import Member, MembershipView
    from dynaq.metrics import NullMetrics
    from dynaq.services.batches import BatchService

    store, clock = MemoryStore(), ManualClock()
    # The reaper's earlier msgpack record sits under the old key; it is not read any more.
    await store.put_if_absent(b"b/lease", msgpack.packb(["other", clock.wall_ms() + 10**9]))
    a, b = (
        BatchService(
            store, clock, MembershipView(Member(n, "x:1")), NullMetrics(), reap_interval_s=10
        )
        for n in ("a", "b")
    )
    assert await a._take_lease() is True
    assert await b._take_lease() is False
    clock.advance(30)  # three intervals: still a's, to the millisecond
    assert await b._take_lease() is False
    assert await a._take_lease() is True  # a's next round renews it
    clock.advance(30.001)
    assert await b._take_lease() is True
    assert await a._take_lease() is False
    item = await store.get(BATCH_REAPER_LEASE)
    assert item is not None and json.loads(item.value)["name"] == "b"


async def test_a_refresh_whose_answer_was_lost_keeps_the_lease() -> None:
    """An LWT that timed out may have applied: the next refresh finds the record still
    names this holder and keeps the lease (a healthy node once shut itself down)."""
    from dynaq.errors import StorageUnavailable
    from dynaq.storage.memory import MemoryStore

    class LosesOneAnswer(MemoryStore):
        lose_next = False

        async def put_if_version(self, key: bytes, value: bytes, version: int) -> int | None:
            result = await super().put_if_version(key, value, version)
            if self.lose_next:
                self.lose_next = False
                raise StorageUnavailable("write timed out (outcome unknown)")
            return result

    clock = ManualClock()
    store = LosesOneAnswer()
    lease = CasLease(store, b"lease", "node-a", clock, 10)
    assert await lease.acquire()
    store.lose_next = True
    clock.advance(1)
    with pytest.raises(StorageUnavailable):
        await lease.refresh()
    clock.advance(1)
    assert await lease.refresh()
    other = CasLease(store, b"lease", "node-b", clock, 10)
    assert not await other.acquire()
