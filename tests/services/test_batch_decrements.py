"""Estimated-mode decrements coalesced per batch (issue 18), on a memory store.

Concurrent decrements of one batch share header writes: the count is exact,
one caller (the one whose part reached zero) sees the completion, the event
goes out once, and far fewer writes are made than decrements. A write that
fails fails its whole group and counts none of it; a caller cancelled before
its group was written is left out; two nodes coalescing on one store still
count every decrement once (their conditional puts retry).
"""

from __future__ import annotations

import asyncio

import pytest

from dynaq.clock import ManualClock
from dynaq.core import keys
from dynaq.core.membership import Member, MembershipView
from dynaq.errors import BatchNotFound, StorageUnavailable, WrongBatchMode
from dynaq.metrics import NullMetrics
from dynaq.services.batches import ESTIMATED, EXACT, BatchService, Completion, DecrIncomplete
from dynaq.services.batches.decrements import DecrCoalescer, DecrResult
from dynaq.services.batches.headers import Headers
from dynaq.storage.memory import MemoryStore
from tests.services.batch_faults import Fault, FaultyStore


class _SlowHeaders(MemoryStore):
    """Header writes take a while (as a durable write does), or wait at a gate."""

    def __init__(self, delay_s: float = 0.001) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def put_if_version(self, key: bytes, value: bytes, version: int) -> int | None:
        if key.startswith(keys.BATCH_HEADER):
            if self.gate is not None:
                self.entered.set()
                await self.gate.wait()
            else:
                await asyncio.sleep(self.delay_s)
        return await super().put_if_version(key, value, version)


def _service(store: MemoryStore | FaultyStore, clock: ManualClock) -> BatchService:
    return BatchService(
        store, clock, MembershipView(Member("n", "x:1")), NullMetrics(), reap_interval_s=0
    )


async def _closed_batch(svc: BatchService, items: int) -> int:
    e = await svc.open(ESTIMATED, "est")
    await svc.incr(e, items)
    await svc.close(e, ESTIMATED)
    return e


async def _settle(rounds: int = 50) -> None:
    """Let started callers reach their batch's waiting group."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def test_concurrent_decrements_coalesce_count_exactly_and_complete_once() -> None:
    inner = _SlowHeaders()
    store = FaultyStore(inner)
    svc = _service(store, ManualClock())
    events: list[Completion] = []

    async def listener(done: Completion) -> None:
        events.append(done)

    svc.on_completion(listener)
    clients, each = 32, 25
    e = await _closed_batch(svc, clients * each)
    store.prefix = keys.batch_header(e)  # from here on, count this header's writes only

    async def client() -> list[Completion]:
        seen: list[Completion] = []
        for _ in range(each):
            seen += await svc.decr([(e, 1)])
        return seen

    seen = [c for got in await asyncio.gather(*(client() for _ in range(clients))) for c in got]
    header = await svc.get(e)
    assert header.pending == 0 and header.complete and header.announced
    assert [c.batch_id for c in seen] == [e]  # one caller saw the completion
    assert events == seen  # delivered once, the completion its caller saw
    assert store.flips[e] == 1
    # 800 decrements; the writes are the coalesced updates plus the announcement.
    writes = store.calls["put_if_version"]
    assert writes <= clients * each // 10, writes
    assert not svc._decrement_groups  # nothing left behind when idle


async def test_each_caller_gets_the_count_its_own_part_left() -> None:
    store = _SlowHeaders()
    svc = _service(store, ManualClock())
    n = 200
    e = await _closed_batch(svc, n)
    coalescer = DecrCoalescer(Headers(store, ManualClock(), NullMetrics()))
    results: list[DecrResult] = await asyncio.gather(*(coalescer.decr(e, 1) for _ in range(n)))
    assert sorted(r.pending for r in results) == list(range(n))  # one value each, none shared
    done = [r for r in results if r.completion is not None]
    assert len(done) == 1 and done[0].pending == 0 and done[0].completion is not None
    assert done[0].completion.batch_id == e
    # Over-decrementing goes below zero (the estimate's nature) and completes nothing more.
    extra = await asyncio.gather(*(coalescer.decr(e, 2) for _ in range(3)))
    assert sorted(r.pending for r in extra) == [-6, -4, -2]
    assert all(r.completion is None for r in extra)


async def test_a_failed_write_fails_its_whole_group_and_counts_none_of_it() -> None:
    inner = _SlowHeaders()
    store = FaultyStore(inner)
    svc = _service(store, ManualClock())
    e = await _closed_batch(svc, 10)
    store.prefix = keys.batch_header(e)
    inner.gate = asyncio.Event()
    first = asyncio.create_task(svc.decr([(e, 1)]))
    await inner.entered.wait()  # the first update is in flight; the next callers group up
    group = [asyncio.create_task(svc.decr([(e, by)])) for by in (2, 3, 4)]
    await _settle()
    store.fault = Fault("put_if_version", store.calls["put_if_version"] + 1, "fail")
    inner.gate.set()
    assert await first == []
    outcomes = await asyncio.gather(*group, return_exceptions=True)
    for by, outcome in zip((2, 3, 4), outcomes, strict=True):
        assert isinstance(outcome, DecrIncomplete), outcome
        assert outcome.completions == []
        assert [(f.batch_id, f.by) for f in outcome.failed] == [(e, by)]
        assert isinstance(outcome.failed[0].error, StorageUnavailable)
    assert store.fired is not None  # the group's one write is the one that failed
    assert (await svc.get(e)).pending == 9  # only the first caller's part counted
    # Each failed caller retries its own part: counted once, completing at zero.
    retried = await asyncio.gather(*(svc.decr([(e, by)]) for by in (2, 3, 4)))
    assert sorted(len(r) for r in retried) == [0, 0, 1]
    assert (await svc.get(e)).pending == 0 and (await svc.get(e)).complete


async def test_a_caller_cancelled_before_its_write_is_left_out() -> None:
    inner = _SlowHeaders()
    svc = _service(inner, ManualClock())
    e = await _closed_batch(svc, 10)
    inner.gate = asyncio.Event()
    first = asyncio.create_task(svc.decr([(e, 1)]))
    await inner.entered.wait()
    gone = asyncio.create_task(svc.decr([(e, 5)]))
    kept = asyncio.create_task(svc.decr([(e, 2)]))
    await _settle()
    gone.cancel()
    inner.gate.set()
    assert await first == [] and await kept == []
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert (await svc.get(e)).pending == 7


async def test_two_nodes_coalescing_on_one_store_count_every_decrement_once() -> None:
    inner = _SlowHeaders()
    store = FaultyStore(inner)
    a, b = _service(store, ManualClock()), _service(store, ManualClock())
    events: list[Completion] = []

    async def listener(done: Completion) -> None:
        events.append(done)

    a.on_completion(listener)
    b.on_completion(listener)
    clients, each = 8, 25
    e = await _closed_batch(a, 2 * clients * each)
    store.prefix = keys.batch_header(e)

    async def client(svc: BatchService) -> list[Completion]:
        seen: list[Completion] = []
        for _ in range(each):
            seen += await svc.decr([(e, 1)])
        return seen

    runs = await asyncio.gather(*(client(s) for s in (a, b) for _ in range(clients)))
    seen = [c for got in runs for c in got]
    assert (await a.get(e)).pending == 0
    assert [c.batch_id for c in seen] == [e] and events == seen
    assert store.flips[e] == 1


async def test_a_request_naming_one_batch_is_refused_or_failed_as_before() -> None:
    plain = MemoryStore()
    svc = _service(plain, ManualClock())
    e = await _closed_batch(svc, 3)
    x = await svc.open(EXACT, None)
    with pytest.raises(BatchNotFound):  # checked by the update itself: nothing applied
        await svc.decr([(e + 1, 1)])
    with pytest.raises(WrongBatchMode):
        await svc.decr([(x, 1)])
    store = FaultyStore(plain, prefix=keys.batch_header(e))
    store.fault = Fault("put_if_version", 1, "fail")
    svc = _service(store, ManualClock())
    with pytest.raises(DecrIncomplete) as info:
        await svc.decr([(e, 1), (e, 2)])
    assert [(f.batch_id, f.by) for f in info.value.failed] == [(e, 3)]
    assert (await svc.get(e)).pending == 3
    assert [c.batch_id for c in await svc.decr([(e, 1), (e, 2)])] == [e]
