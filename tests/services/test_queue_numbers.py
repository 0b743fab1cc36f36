"""A new queue's number: concurrent creations on one node, or on several nodes of one
store, all get a queue and a distinct number; a 409 only after sustained contention."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dynaq.clock import ManualClock, SystemClock
from dynaq.config.sections import QueueDefaults
from dynaq.core import keys
from dynaq.errors import AlreadyExists, Conflict
from dynaq.services.catalog import NUMBER_ATTEMPTS, Catalog, QueueInfo
from dynaq.storage.base import Item, Store
from dynaq.storage.embedded import LmdbStore
from dynaq.storage.memory import MemoryStore


class YieldingStore(MemoryStore):
    """A memory store whose calls yield to the loop first, as a real store's do (its
    reads and conditional writes interleave across tasks)."""

    async def get(self, key: bytes) -> Item | None:
        await asyncio.sleep(0)
        return await super().get(key)

    async def put_if_absent(self, key: bytes, value: bytes) -> int | None:
        await asyncio.sleep(0)
        return await super().put_if_absent(key, value)

    async def put_if_version(self, key: bytes, value: bytes, version: int) -> int | None:
        await asyncio.sleep(0)
        return await super().put_if_version(key, value, version)


class RivalStore(MemoryStore):
    """A memory store where another node claims a queue number just before each of the
    first ``losses`` claims (every claim when None)."""

    def __init__(self, losses: int | None = None) -> None:
        super().__init__()
        self.losses = losses
        self.claims = 0

    async def put_if_version(self, key: bytes, value: bytes, version: int) -> int | None:
        if key == keys.QUEUE_NUMBER_SEQ:
            self.claims += 1
            if self.losses is None or self.claims <= self.losses:
                item = await self.get(key)
                assert item is not None
                await self.put(key, str(int(item.value) + 1).encode())
        return await super().put_if_version(key, value, version)


class SteppingClock(ManualClock):
    """A manual clock whose sleeps move it on at once (and are recorded)."""

    def __init__(self) -> None:
        super().__init__()
        self.slept: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds)
        await asyncio.sleep(0)


@pytest.fixture(params=["memory", "lmdb"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s: Store
    if request.param == "memory":
        s = YieldingStore()
    else:
        s = LmdbStore(tmp_path / "lmdb", map_size=64 * 1024**2)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


def _catalog(store: Store, clock: ManualClock | SystemClock | None = None) -> Catalog:
    return Catalog(store, clock or SystemClock(), QueueDefaults())


def _created(results: list[QueueInfo | BaseException]) -> list[QueueInfo]:
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors[:3]
    return [r for r in results if isinstance(r, QueueInfo)]


async def test_concurrent_creations_on_one_node_all_get_distinct_numbers(store: Store) -> None:
    catalog = _catalog(store, ManualClock())  # nothing sleeps: this node's claims never clash
    results = await asyncio.gather(
        *(catalog.create_queue(f"q-{i}") for i in range(200)), return_exceptions=True
    )
    created = _created(results)
    assert sorted(q.number for q in created) == list(range(1, 201))
    again = _catalog(store)
    await again.reload()
    assert again.queue_names() == sorted(f"q-{i}" for i in range(200))


async def test_concurrent_creations_on_two_nodes_of_one_store_all_succeed(store: Store) -> None:
    a, b = _catalog(store), _catalog(store)
    results = await asyncio.gather(
        *(c.create_queue(f"q-{i}") for i in range(150) for c in ((a, b)[i % 2],)),
        return_exceptions=True,
    )
    created = _created(results)
    assert len({q.number for q in created}) == 150
    await a.reload()
    await b.reload()
    assert a.queue_names() == b.queue_names() == sorted(f"q-{i}" for i in range(150))
    assert {q.name: q.number for q in a.cached_queues()} == {q.name: q.number for q in created}


async def test_an_existing_name_is_still_already_exists(store: Store) -> None:
    a, b = _catalog(store), _catalog(store)
    first = await a.create_queue("q")
    with pytest.raises(AlreadyExists, match=r"^Queue already exists\.$"):
        await a.create_queue("q")
    with pytest.raises(AlreadyExists, match=r"^Queue already exists\.$"):
        await b.create_queue("q")
    results = await asyncio.gather(
        *(c.create_queue("same") for c in (a, b) * 10), return_exceptions=True
    )
    assert sum(isinstance(r, QueueInfo) for r in results) == 1
    assert all(isinstance(r, (QueueInfo, AlreadyExists)) for r in results), results
    assert (await b.queue("q")).number == first.number


async def test_the_counter_written_by_an_earlier_release_is_read_as_before() -> None:
    store = MemoryStore()
    await store.put(keys.QUEUE_NUMBER_SEQ, b"41")
    catalog = _catalog(store, ManualClock())
    assert (await catalog.create_queue("q")).number == 42
    item = await store.get(keys.QUEUE_NUMBER_SEQ)
    assert item is not None and item.value == b"42"
    assert (await _catalog(MemoryStore(), ManualClock()).create_queue("first")).number == 1


async def test_claims_lost_to_other_nodes_are_retried_with_a_growing_jittered_backoff() -> None:
    store, clock = RivalStore(losses=10), SteppingClock()
    await store.put(keys.QUEUE_NUMBER_SEQ, b"5")
    info = await _catalog(store, clock).create_queue("q")
    assert info.number == 5 + 10 + 1  # the rivals took 6..15
    assert store.claims == 11
    assert len(clock.slept) == 9  # the first retry reads the winner's write at once
    assert all(0 < s <= 0.1 for s in clock.slept)
    assert clock.slept[0] < clock.slept[-1]


async def test_sustained_contention_across_nodes_is_a_bounded_precise_conflict() -> None:
    store, clock = RivalStore(), SteppingClock()
    await store.put(keys.QUEUE_NUMBER_SEQ, b"1")
    catalog = _catalog(store, clock)
    with pytest.raises(Conflict) as err:
        await catalog.create_queue("q")
    assert str(err.value) == (
        "queue 'q' was not created: other nodes kept taking the next queue number "
        f"({NUMBER_ATTEMPTS} attempts); retry"
    )
    assert store.claims == NUMBER_ATTEMPTS
    assert sum(clock.slept) < 10.0
    assert await store.get(keys.queue_config("q")) is None
    assert catalog.cached_queue("q") is None


async def test_concurrent_changes_to_one_record_on_one_node_all_apply(store: Store) -> None:
    catalog = _catalog(store, ManualClock())
    for i in range(40):
        await catalog.create_queue(f"q-{i}")
    await catalog.create_topic("t")
    subscribed = await asyncio.gather(
        *(catalog.subscribe("t", f"q-{i}") for i in range(40)), return_exceptions=True
    )
    assert not [r for r in subscribed if isinstance(r, BaseException)]
    assert sorted((await catalog.topic("t", fresh=True)).queues) == sorted(
        f"q-{i}" for i in range(40)
    )
    updated = await asyncio.gather(
        *(catalog.update_queue("q-0", {"visibility_timeout_s": float(i + 1)}) for i in range(40)),
        return_exceptions=True,
    )
    assert not [r for r in updated if isinstance(r, BaseException)]
    assert not len(catalog._records)  # the per-record locks are dropped when idle
