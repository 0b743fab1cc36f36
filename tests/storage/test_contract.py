"""One contract suite, run against every storage backend that exists."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dynaq.errors import StorageUnavailable
from dynaq.storage.base import Delete, Put, Store, prefix_end
from dynaq.storage.cassandra import CassandraStore
from dynaq.storage.embedded import LmdbStore
from dynaq.storage.memory import MemoryStore

# embedded: reads on the event loop (the default); embedded-threads: on a pool;
# embedded-process: commits in a writer process of their own.
BACKENDS = ["memory", "embedded", "embedded-threads", "embedded-process", "cassandra", "riak"]


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s: Store
    if request.param == "memory":
        s = MemoryStore()
    elif request.param == "cassandra":
        # Only Cassandra runs need the session's server (tests.fixtures.cassandra).
        # The driver is imported with this module: its import reads files, which
        # the loop's blocking-call guard refuses inside this async fixture.
        from tests.fixtures.cassandra import new_keyspace

        # Started off the loop (the session fixture blocks) when no earlier test did.
        server = await asyncio.to_thread(request.getfixturevalue, "cassandra")
        s = CassandraStore([server.host], keyspace=new_keyspace())
    elif request.param == "riak":
        from tests.fixtures.riak import open_riak_store

        # Started (first time: ~20 s) off the loop: the session fixture blocks.
        s = await open_riak_store(await asyncio.to_thread(request.getfixturevalue, "riak"))
    else:
        threads = 2 if request.param == "embedded-threads" else 0
        writer = "process" if request.param == "embedded-process" else "thread"
        s = LmdbStore(
            tmp_path / "lmdb", map_size=256 * 1024**2, read_threads=threads, writer=writer
        )
    if request.param != "riak":
        await s.open()
    try:
        yield s
    finally:
        await s.close()


async def test_get_put_roundtrip(store: Store) -> None:
    assert await store.get(b"a") is None
    v1 = await store.put(b"a", b"one")
    item = await store.get(b"a")
    assert item is not None and item.value == b"one" and item.version == v1
    v2 = await store.put(b"a", b"two")
    assert v2 != v1
    item = await store.get(b"a")
    assert item is not None and item.value == b"two" and item.version == v2


async def test_empty_value_and_binary_keys(store: Store) -> None:
    await store.put(b"\x00\xff", b"")
    item = await store.get(b"\x00\xff")
    assert item is not None and item.value == b""


async def test_get_many_keeps_order_and_gaps(store: Store) -> None:
    await store.put(b"k1", b"1")
    await store.put(b"k3", b"3")
    items = await store.get_many([b"k3", b"k2", b"k1"])
    assert [i.value if i else None for i in items] == [b"3", None, b"1"]


async def test_put_if_absent(store: Store) -> None:
    assert await store.put_if_absent(b"x", b"first") is not None
    assert await store.put_if_absent(b"x", b"second") is None
    item = await store.get(b"x")
    assert item is not None and item.value == b"first"


async def test_put_if_version(store: Store) -> None:
    v = await store.put(b"x", b"a")
    assert await store.put_if_version(b"x", b"b", v + 12345) is None
    v2 = await store.put_if_version(b"x", b"b", v)
    assert v2 is not None and v2 != v
    assert await store.put_if_version(b"x", b"c", v) is None  # stale version loses
    item = await store.get(b"x")
    assert item is not None and item.value == b"b"
    assert await store.put_if_version(b"missing", b"c", 1) is None


async def test_concurrent_conditional_increments_lose_nothing(store: Store) -> None:
    await store.put(b"ctr", b"0")

    async def incr() -> None:
        while True:
            item = await store.get(b"ctr")
            assert item is not None
            if await store.put_if_version(b"ctr", str(int(item.value) + 1).encode(), item.version):
                return

    await asyncio.gather(*(incr() for _ in range(50)))
    item = await store.get(b"ctr")
    assert item is not None and item.value == b"50"


async def test_each_put_replaces_the_one_awaited_before_it(store: Store) -> None:
    """A put issued after another put of the same key has returned is the one that
    stays, even when the second value sorts lower and other writes keep the store
    busy. Cassandra 2.1 stamped plain writes by a per-stream millisecond clock, so
    two puts of one key in the same millisecond tied and the greater value won:
    1.5% of such overwrites read back the first value (a purge task stuck
    "running" after it had finished)."""
    stop = asyncio.Event()

    async def noise(n: int) -> None:
        for i in range(2000):  # bounded; stops as soon as the overwrites are done
            if stop.is_set():
                return
            await store.put(b"noise%d-%d" % (n, i % 20), b"x")

    busy = [asyncio.create_task(noise(n)) for n in range(6)]
    try:
        lost = []
        for i in range(400):
            key = b"task%d" % i
            await store.put(key, b"zzz running")
            await store.put(key, b"aaa done")
            item = await store.get(key)
            if item is None or item.value != b"aaa done":
                lost.append((key, item))
    finally:
        stop.set()
        await asyncio.gather(*busy)
    assert lost == []


async def test_delete_reports_existence(store: Store) -> None:
    await store.put(b"d", b"1")
    assert await store.delete(b"d") is True
    assert await store.delete(b"d") is False
    assert await store.get(b"d") is None


async def test_write_batch_results_and_atomic_visibility(store: Store) -> None:
    await store.put(b"b2", b"old")
    results = await store.write_batch(
        [Put(b"b1", b"1"), Delete(b"b2"), Delete(b"nope"), Put(b"b3", b"3")]
    )
    assert results == [True, True, False, True]
    rows = await store.scan(b"b", b"c", 10)
    assert rows == [(b"b1", b"1"), (b"b3", b"3")]
    assert await store.write_batch([]) == []


async def test_scan_bounds_limit_and_order(store: Store) -> None:
    await store.write_batch([Put(bytes([1, i]), bytes([i])) for i in range(20, 0, -1)])
    rows = await store.scan(bytes([1, 5]), bytes([1, 10]), 100)
    assert [k[1] for k, _ in rows] == [5, 6, 7, 8, 9]  # end is exclusive
    rows = await store.scan(bytes([1]), bytes([2]), 3)
    assert [k[1] for k, _ in rows] == [1, 2, 3]
    assert await store.scan(bytes([2]), bytes([3]), 10) == []
    assert await store.scan(bytes([1, 9]), bytes([1, 5]), 10) == []


async def test_scan_after_many_deletes_still_finds_tail(store: Store) -> None:
    await store.write_batch([Put(i.to_bytes(4, "big"), b"v") for i in range(5000)])
    await store.write_batch([Delete(i.to_bytes(4, "big")) for i in range(4990)])
    rows = await store.scan(b"\x00" * 4, b"\xff" * 4, 100)
    assert [int.from_bytes(k, "big") for k, _ in rows] == list(range(4990, 5000))


async def test_list_keys_prefix_and_paging(store: Store) -> None:
    await store.write_batch([Put(b"p/" + bytes([i]), b"") for i in range(10)])
    await store.put(b"q/other", b"")
    await store.put(b"o/other", b"")
    first = await store.list_keys(b"p/", 4)
    assert first == [b"p/" + bytes([i]) for i in range(4)]
    rest = await store.list_keys(b"p/", 100, start_after=first[-1])
    assert rest == [b"p/" + bytes([i]) for i in range(4, 10)]


async def test_delete_range(store: Store) -> None:
    await store.write_batch([Put(b"r" + bytes([i]), b"") for i in range(50)])
    await store.put(b"s", b"keep")
    assert await store.delete_range(b"r", prefix_end(b"r"), chunk=7) == 50
    assert await store.list_keys(b"r", 100) == []
    assert await store.get(b"s") is not None


async def test_closed_store_raises_storage_unavailable(store: Store) -> None:
    await store.close()
    with pytest.raises(StorageUnavailable):
        await store.get(b"a")
    await store.open()


async def test_group_commit_many_concurrent_writers(tmp_path: Path) -> None:
    """Concurrent puts share commits: fewer commits than writes, nothing lost."""
    s = LmdbStore(tmp_path / "gc", map_size=256 * 1024**2)
    await s.open()
    try:
        await asyncio.gather(
            *(s.write_batch([Put(i.to_bytes(4, "big"), b"x" * 100)]) for i in range(2000))
        )
        assert len(await s.list_keys(b"", 10_000)) == 2000
        assert s.commits < 2000
    finally:
        await s.close()


async def test_embedded_store_persists_across_reopen(tmp_path: Path) -> None:
    s = LmdbStore(tmp_path / "p", map_size=64 * 1024**2)
    await s.open()
    await s.put(b"k", b"v")
    await s.close()
    s2 = LmdbStore(tmp_path / "p", map_size=64 * 1024**2)
    await s2.open()
    try:
        item = await s2.get(b"k")
        assert item is not None and item.value == b"v"
    finally:
        await s2.close()


async def test_last_key_is_the_greatest_key_in_a_range(store: Store) -> None:
    from dynaq.core import keys
    from dynaq.core.ids import lane_start

    q = 7
    ids = [lane_start(5) + 32 * i for i in range(1, 40)] + [lane_start(6) + 32]
    await store.write_batch([Put(keys.message(q, i), b"x") for i in ids])
    await store.put(b"c/z", b"1")
    lane5 = (keys.message(q, lane_start(5)), keys.message(q, lane_start(6)))
    assert await store.last_key(*lane5) == keys.message(q, ids[-2])
    await store.write_batch([Delete(keys.message(q, ids[-2]))])
    assert await store.last_key(*lane5) == keys.message(q, ids[-3])  # deleted: skipped
    lane7 = (keys.message(q, lane_start(7)), keys.message(q, lane_start(8)))
    assert await store.last_key(*lane7) is None
    last_lane = (keys.message(q, lane_start(1023)), keys.message(q, 1 << 63))
    assert await store.last_key(*last_lane) is None
    assert await store.last_key(b"c/", b"c0") == b"c/z"  # any range, not only one lane
    assert await store.last_key(b"c0", b"c/") is None


async def test_inline_reads_let_other_tasks_run(tmp_path: Path) -> None:
    """Reads on the event loop do not suspend their caller, so a task that only
    reads yields now and then: another task still gets the loop."""
    s = LmdbStore(tmp_path / "inline", map_size=64 * 1024**2)
    await s.open()
    try:
        await s.put(b"k", b"v")
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        try:
            for _ in range(200):
                assert await s.get(b"k") is not None
        finally:
            task.cancel()
        assert ticks >= 10
    finally:
        await s.close()
