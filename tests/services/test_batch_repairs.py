"""Batch tracking's records, reaper, relay and estimated decrements, on a memory store.

The review's reproductions, kept as tests: a batch busy being acked is not
reaped (its header may not change for hours), a decrement request with one
bad entry applies none, one whose store fails midway returns what it
completed; and old records still decode.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import msgpack
import pytest

from dynaq.clock import ManualClock
from dynaq.core import keys
from dynaq.core.batch_items import ItemRef
from dynaq.core.membership import Member, MembershipView
from dynaq.errors import (
    BatchClosed,
    BatchNotFound,
    DynaqError,
    StorageUnavailable,
    TopicNotFound,
    WrongBatchMode,
)
from dynaq.metrics import NullMetrics
from dynaq.services.batches import (
    ESTIMATED,
    EXACT,
    BatchHeader,
    BatchService,
    Completion,
    DecrIncomplete,
)
from dynaq.services.batches.records import Block
from dynaq.storage.base import Item, Store, prefix_end
from dynaq.storage.memory import MemoryStore
from tests.services.batch_faults import Fault, FaultyStore


def _service(store: Store, clock: ManualClock, relay_retry_s: float = 1.0) -> BatchService:
    return BatchService(
        store,
        clock,
        MembershipView(Member("n", "x:1")),
        NullMetrics(),
        reap_interval_s=0,
        relay_retry_s=relay_retry_s,
    )


# records -----------------------------------------------------------------------


def test_records_of_the_earlier_format_still_decode() -> None:
    old = msgpack.packb(["exact", "k", True, True, 0, 10, 1, 2, 3])
    h = BatchHeader.decode(old)
    assert (h.mode, h.user_key, h.closed, h.complete, h.items, h.completed_ms) == (
        "exact",
        "k",
        True,
        True,
        10,
        3,
    )
    # A completion of the earlier release was published (or lost) by it: never again.
    assert h.announced and not h.removing and h.retiring == [] and h.adds == []
    assert not BatchHeader.decode(
        msgpack.packb(["estimated", None, False, False, 3, 3, 1, 1, 0])
    ).announced
    assert BatchHeader.decode(h.encode()) == h
    # An empty block of the earlier release was subtracted from its header when it emptied.
    empty = Block.decode(msgpack.packb([10, b"\x00\x00"]))
    assert empty.retired and not empty.emptied and empty.last_ack_ms == 0
    busy = Block.decode(msgpack.packb([10, (0b101).to_bytes(2, "little")]))
    assert (busy.upto, busy.bits, busy.retired) == (10, 0b101, False)
    assert Block.decode(Block(10, 0, False, 7).encode()) == Block(10, 0, False, 7)


# the reaper (review item 10) ------------------------------------------------------


async def test_a_batch_busy_being_acked_is_not_reaped() -> None:
    clock = ManualClock()
    svc = _service(MemoryStore(), clock)
    b = await svc.open(EXACT, "busy")
    blocks = await svc.add_items(b, 8192)  # two blocks: no ack empties one for hours
    for hour in range(3):
        for blk, _ in blocks:
            await svc.ack([ItemRef(b, blk, i) for i in range(hour * 1000, hour * 1000 + 1000)])
        clock.advance(3600)
    assert await svc.reap_once() == (0, 0)
    assert (await svc.get(b)).items == 8192  # the producer's close would still find it
    clock.advance(3600 + 30)  # idle for 2 h now, but within the clock-skew margin
    assert await svc.reap_once() == (0, 0)
    clock.advance(31)
    assert await svc.reap_once() == (1, 8192)
    with pytest.raises(BatchNotFound):
        await svc.get(b)


async def test_a_removal_cut_short_is_finished_by_the_reaper() -> None:
    store = FaultyStore(MemoryStore(), prefix=keys.BATCH_HEADER)
    svc = _service(store, ManualClock())
    b = await svc.open(EXACT, None)
    await svc.add_items(b, 5000)
    store.fault = Fault("delete", 1, "fail")  # the header's delete, after the blocks'
    with pytest.raises(StorageUnavailable):
        await svc.delete(b, EXACT)
    with pytest.raises(BatchNotFound):  # marked: it reads as gone already
        await svc.get(b)
    await svc.reap_once()
    start, end = keys.batch_blocks(b)
    assert await store.inner.get(keys.batch_header(b)) is None
    assert await store.inner.scan(start, end, 10) == []


async def test_an_unannounced_completion_keeps_its_batch_from_the_reaper() -> None:
    clock = ManualClock()
    svc = _service(MemoryStore(), clock)
    failing = [True]

    async def listener(done: Completion) -> None:
        if failing[0]:
            raise StorageUnavailable("topic down")

    svc.on_completion(listener)
    b = await svc.open(ESTIMATED, None)
    assert await svc.close(b, ESTIMATED) is True  # completes; its delivery fails
    clock.advance(604_800 * 2)
    assert await svc.reap_once() == (0, 0)  # not before its completion was delivered
    assert (await svc.get(b)).announced is False
    failing[0] = False
    clock.advance(1)
    await svc.reap_once()  # the repair pass delivers it...
    assert (await svc.get(b)).announced is True
    clock.advance(604_800 * 2)
    assert await svc.reap_once() == (1, 0)  # ... and then it may go


# the relay (review item 9) ------------------------------------------------------


async def test_a_failed_delivery_is_retried_in_the_background_until_it_succeeds() -> None:
    clock = ManualClock()
    svc = _service(MemoryStore(), clock, relay_retry_s=1.0)
    calls: list[int] = []

    async def listener(done: Completion) -> None:
        calls.append(done.batch_id)
        if len(calls) < 3:
            raise StorageUnavailable("topic down")

    svc.on_completion(listener)
    await svc.start()
    try:
        b = await svc.open(EXACT, None)
        assert await svc.close(b, EXACT) is True
        assert calls == [b] and not (await svc.get(b)).announced
        for _ in range(3):  # backoff: 1 s, then 2 s
            clock.advance(2)
            for _ in range(10):
                await asyncio.sleep(0)
        assert calls == [b, b, b] and (await svc.get(b)).announced
        clock.advance(10)
        await asyncio.sleep(0)
        assert calls == [b, b, b]
    finally:
        await svc.stop()


async def test_a_completion_cut_short_by_a_crash_is_delivered_when_the_node_starts_again() -> None:
    """Found by the fault runs: kill -9 after the flip, before the publish, and the event
    waited for the reaper's grace (minutes) although the node was back in seconds."""
    store, clock = MemoryStore(), ManualClock()
    crashed = _service(store, clock)

    async def dies(done: Completion) -> None:
        raise StorageUnavailable("the process is killed here")

    crashed.on_completion(dies)  # not started: no retries, as after a kill -9
    b = await crashed.open(EXACT, None)
    assert await crashed.close(b, EXACT) is True
    assert not (await crashed.get(b)).announced

    restarted = _service(store, clock)  # same store, clock not advanced: no grace passed
    calls: list[int] = []

    async def listener(done: Completion) -> None:
        calls.append(done.batch_id)

    restarted.on_completion(listener)
    await restarted.start()
    try:
        for _ in range(20):
            await asyncio.sleep(0)
        assert calls == [b] and (await restarted.get(b)).announced
        start, end = keys.BATCH_COMPLETION, keys.BATCH_COMPLETION + b"\xff" * 25
        assert await store.scan(start, end, 10) == []  # the record is gone
    finally:
        await restarted.stop()


# estimated decrements (review item 8) -------------------------------------------


async def test_a_decrement_with_one_bad_entry_applies_none() -> None:
    svc = _service(MemoryStore(), ManualClock())
    e = await svc.open(ESTIMATED, None)
    await svc.incr(e, 2)
    await svc.close(e, ESTIMATED)
    x = await svc.open(EXACT, None)
    for bad, error in (((x, 1), WrongBatchMode), ((x + 1, 1), BatchNotFound)):
        with pytest.raises(error):
            await svc.decr([(e, 1), bad])
        assert (await svc.get(e)).pending == 2  # nothing applied: the retry counts once
    assert await svc.decr([(e, 1)]) == []
    done = await svc.decr([(e, 1)])
    assert [d.batch_id for d in done] == [e]


async def test_a_decrement_the_store_fails_midway_returns_what_it_completed() -> None:
    plain = MemoryStore()
    svc = _service(plain, ManualClock())
    a = await svc.open(ESTIMATED, "a")
    b = await svc.open(ESTIMATED, "b")
    for batch in (a, b):
        await svc.incr(batch, 1)
        await svc.close(batch, ESTIMATED)
    store = FaultyStore(plain, prefix=keys.batch_header(b))
    store.fault = Fault("put_if_version", 1, "fail")
    svc = _service(store, ManualClock())
    with pytest.raises(DecrIncomplete) as info:
        await svc.decr([(a, 1), (b, 1)])
    assert [c.batch_id for c in info.value.completions] == [a]  # not lost
    assert [(f.batch_id, f.by) for f in info.value.failed] == [(b, 1)]
    assert isinstance(info.value.failed[0].error, DynaqError)
    assert (await svc.get(a)).complete and not (await svc.get(b)).complete
    done = await svc.decr([(b, 1)])  # retrying only what failed counts each item once
    assert [c.batch_id for c in done] == [b]


async def test_entries_of_one_batch_are_applied_together() -> None:
    svc = _service(MemoryStore(), ManualClock())
    e = await svc.open(ESTIMATED, None)
    await svc.incr(e, 3)
    await svc.close(e, ESTIMATED)
    done = await svc.decr([(e, 1), (e, 2)])
    assert [d.batch_id for d in done] == [e] and (await svc.get(e)).pending == 0


async def test_a_completion_topic_that_does_not_exist_drops_the_event_as_before() -> None:
    svc = _service(MemoryStore(), ManualClock())

    async def listener(done: Completion) -> None:
        raise TopicNotFound("topic done does not exist")

    svc.on_completion(listener)
    b = await svc.open(EXACT, None)
    assert await svc.close(b, EXACT) is True
    assert (await svc.get(b)).announced  # not retried forever, not kept from the reaper


async def test_a_refused_add_leaves_no_trace() -> None:
    store = MemoryStore()
    svc = _service(store, ManualClock())
    closed = await svc.open(EXACT, None)
    await svc.close(closed, EXACT)
    for batch, error in ((closed + 1, BatchNotFound), (closed, BatchClosed)):
        with pytest.raises(error):
            await svc.add_items(batch, 10)
    assert await store.scan(keys.BATCH_REPAIR, prefix_end(keys.BATCH_REPAIR), 10) == []
    start, end = keys.batch_blocks(closed)
    assert await store.scan(start, end, 10) == []


# two nodes at once -------------------------------------------------------------


class _Interleaving(MemoryStore):
    """A memory store whose calls yield to other tasks at random points, so two
    services' multi-record steps interleave as on a real network."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self._rng = random.Random(seed)

    async def _jitter(self) -> None:
        for _ in range(self._rng.randrange(4)):
            await asyncio.sleep(0)

    async def get_many(self, keys_: Sequence[bytes]) -> list[Item | None]:
        await self._jitter()
        return await super().get_many(keys_)

    async def get(self, key: bytes) -> Item | None:
        await self._jitter()
        return await super().get(key)

    async def put_if_version(self, key: bytes, value: bytes, version: int) -> int | None:
        await self._jitter()
        got = await super().put_if_version(key, value, version)
        await self._jitter()
        return got


@pytest.mark.parametrize("seed", range(8))
async def test_two_nodes_acking_one_batch_at_once_complete_it_once(seed: int) -> None:
    store = FaultyStore(_Interleaving(seed))  # no fault: it counts the flips
    clock = ManualClock()
    a, b = _service(store, clock), _service(store, clock)
    batch = await a.open(EXACT, None)
    refs = [
        ItemRef(batch, blk, i)
        for _ in range(6)
        for blk, n in await b.add_items(batch, 5)
        for i in range(n)
    ]
    rng = random.Random(seed)
    work = refs + rng.sample(refs, 10)  # duplicates
    rng.shuffle(work)
    chunks = [work[i : i + 3] for i in range(0, len(work), 3)]
    calls = [(a, b)[k % 2].ack(c) for k, c in enumerate(chunks)]
    results = await asyncio.gather(a.close(batch, EXACT), *calls)
    reported = sum(len(r) for r in results[1:] if isinstance(r, list))
    h = await a.get(batch)
    assert h.complete and h.pending == 0 and not h.retiring and not h.adds
    assert store.flips[batch] == 1
    # No ack can complete the batch before it is closed: if the close did not find
    # it complete, the ack that completed it reported it.
    assert reported == (0 if results[0] is True else 1)
    assert await store.inner.scan(keys.BATCH_REPAIR, prefix_end(keys.BATCH_REPAIR), 10) == []


async def test_a_completing_update_whose_outcome_is_unknown_is_delivered_by_the_relay() -> None:
    """Found by the ring's fault runs: the update that completes a batch times out but
    applies (a Cassandra timeout); the client's retry finds the batch complete and
    reports nothing, so only the relay's check of the header delivers the event,
    within its retry delay, not the reaper's grace of minutes later."""
    clock = ManualClock()
    store = FaultyStore(MemoryStore(), prefix=keys.BATCH_HEADER)
    svc = _service(store, clock, relay_retry_s=1.0)
    calls: list[int] = []

    async def listener(done: Completion) -> None:
        calls.append(done.batch_id)

    svc.on_completion(listener)
    await svc.start()
    for _ in range(20):  # the start's delivery of left records is over
        await asyncio.sleep(0)
    try:
        b = await svc.open(ESTIMATED, None)
        store.fault = Fault("put_if_version", 1, "lost")  # the close, which completes it
        with pytest.raises(StorageUnavailable):
            await svc.close(b, ESTIMATED)
        assert await svc.close(b, ESTIMATED) is True  # the retry: complete already
        assert calls == [] and not (await svc.get(b)).announced
        for _ in range(20):  # the relay's retry task starts and sleeps
            await asyncio.sleep(0)
        clock.advance(1.5)
        for _ in range(20):
            await asyncio.sleep(0)
        assert calls == [b] and (await svc.get(b)).announced
        assert await store.scan(keys.BATCH_COMPLETION, prefix_end(keys.BATCH_COMPLETION), 10) == []
    finally:
        await svc.stop()
