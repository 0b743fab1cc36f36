"""Per-queue message counts kept by the store in the transaction of every write
(``Store.message_counts``): exact against the keys the store holds, whoever wrote
them, whatever failed, and counted once for a store written before them."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import lmdb
import pytest

from dynaq.errors import InsufficientStorage
from dynaq.storage.base import MESSAGE_KEY_LEN, MESSAGE_PREFIX, Delete, Put, Store, prefix_end
from dynaq.storage.embedded import LmdbStore
from dynaq.storage.memory import MemoryStore

MAP = 64 * 1024**2


def _msg(queue: int, mid: int) -> bytes:
    return MESSAGE_PREFIX + queue.to_bytes(4, "big") + mid.to_bytes(8, "big")


async def _count(store: Store, queue: int) -> int:
    counts = await store.message_counts([queue])
    assert counts is not None
    return counts[0]


async def _scanned(store: Store, queue: int) -> int:
    """How many message keys of ``queue`` a scan finds (what the count must equal)."""
    start = MESSAGE_PREFIX + queue.to_bytes(4, "big")
    rows = await store.scan(start, prefix_end(start), 10**9)
    return sum(1 for k, _ in rows if len(k) == MESSAGE_KEY_LEN)


@pytest.fixture(params=["memory", "lmdb-thread", "lmdb-process"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s: Store
    if request.param == "memory":
        s = MemoryStore()
    else:
        s = LmdbStore(tmp_path / "db", map_size=MAP, writer=request.param.split("-")[1])
    await s.open()
    try:
        yield s
    finally:
        await s.close()


async def test_counts_follow_every_kind_of_write(store: Store) -> None:
    assert await store.message_counts([1, 2]) == [0, 0]
    await store.write_batch([Put(_msg(1, i), b"x") for i in range(10)])
    await store.write_batch([Put(_msg(2, i), b"y") for i in range(3)])
    await store.put(_msg(1, 100), b"single")
    assert await store.put_if_absent(_msg(1, 101), b"once") is not None
    assert await store.put_if_absent(_msg(1, 101), b"twice") is None
    assert await store.message_counts([1, 2]) == [12, 3]

    # Deletes count only keys that existed; a mixed batch (a move) counts both sides.
    assert await store.delete(_msg(1, 0)) is True
    assert await store.delete(_msg(1, 0)) is False
    moved = await store.write_batch(
        [Delete(_msg(1, 1)), Delete(_msg(1, 999)), Put(_msg(2, 50), b"moved")]
    )
    assert moved == [True, False, True]
    assert await store.message_counts([1, 2]) == [10, 4]

    # Re-putting an existing message key (never done by the domain) is no new message,
    # alone or in a batch with others, and its value is replaced.
    await store.put(_msg(2, 50), b"again")
    await store.write_batch([Put(_msg(2, 50), b"third"), Put(_msg(2, 51), b"new")])
    item = await store.get(_msg(2, 50))
    assert item is not None and item.value == b"third"
    assert await store.message_counts([2]) == [5]

    # Keys of other shapes are not messages, even under the same prefix.
    await store.write_batch([Put(b"c/q/orders", b"{}"), Put(_msg(1, 5) + b"!", b"long")])
    await store.put(MESSAGE_PREFIX + b"short", b"x")
    assert await store.message_counts([1, 2]) == [10, 5]

    for q in (1, 2):
        assert await _count(store, q) == await _scanned(store, q)


async def test_a_range_delete_empties_the_count(store: Store) -> None:
    await store.write_batch([Put(_msg(7, i), b"x") for i in range(250)])
    start = MESSAGE_PREFIX + (7).to_bytes(4, "big")
    assert await store.delete_range(start, prefix_end(start), chunk=100) == 250
    assert await store.message_counts([7]) == [0]


async def test_concurrent_writers_grouped_into_commits_are_counted_exactly(
    store: Store,
) -> None:
    rng = random.Random(5)
    written: list[int] = []

    async def writer(w: int) -> None:
        for r in range(20):
            ids = [w * 10_000 + r * 10 + j for j in range(rng.randint(1, 10))]
            await store.write_batch([Put(_msg(3, i), b"v") for i in ids])
            written.extend(ids)
            gone = rng.sample(ids, rng.randint(0, len(ids)))
            if gone:
                await store.write_batch([Delete(_msg(3, i)) for i in gone])

    await asyncio.gather(*(writer(w) for w in range(16)))
    assert await _count(store, 3) == await _scanned(store, 3)


async def test_a_refused_write_counts_nothing(tmp_path: Path) -> None:
    s = LmdbStore(tmp_path / "db", map_size=2 * 1024**2, min_free_disk=0)
    await s.open()
    try:
        n = 0
        with pytest.raises(InsufficientStorage):
            while n < 100_000:
                await s.write_batch([Put(_msg(1, n + j), os.urandom(300)) for j in range(20)])
                n += 20
        assert await s.message_counts([1]) == [n] == [await _scanned(s, 1)]
    finally:
        await s.close()


async def test_a_store_written_before_the_counts_is_counted_at_its_next_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "db"
    s = LmdbStore(path, map_size=MAP)
    await s.open()
    await s.write_batch([Put(_msg(1, i), b"x") for i in range(40)])
    await s.write_batch([Put(_msg(9, i), b"x") for i in range(7)])
    await s.close()
    await asyncio.to_thread(_drop_counts, path)
    s = LmdbStore(path, map_size=MAP)
    await s.open()
    try:
        assert await s.message_counts([1, 9, 4]) == [40, 7, 0]
        await s.delete(_msg(1, 0))
        assert await s.message_counts([1]) == [39]
    finally:
        await s.close()


def _drop_counts(path: Path) -> None:
    """Leave the store as an older dynaq left it: the same keys, no counts database."""
    env = lmdb.open(str(path), map_size=MAP, max_dbs=4)
    with env.begin(write=True) as txn:
        txn.drop(env.open_db(b"counts", txn=txn), delete=True)
    env.close()


_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from dynaq.storage.base import Delete, Put
    from dynaq.storage.embedded import LmdbStore

    def key(i):
        return b"m" + (4).to_bytes(4, "big") + i.to_bytes(8, "big")

    async def main(path, tag, tags, rounds):
        s = LmdbStore(path, map_size=64 * 1024**2, version_tag=tag, version_tags=tags)
        await s.open()
        print("open", flush=True)
        base = tag * 10**9
        for r in range(rounds):
            ids = [base + r * 50 + j for j in range(50)]
            await asyncio.gather(*(s.write_batch([Put(key(i), b"v")]) for i in ids[:25]),
                                 s.write_batch([Put(key(i), b"v") for i in ids[25:]]))
            await s.write_batch([Delete(key(i)) for i in ids[::3]])
        await s.close()

    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
    """
)


def _write_from_processes(path: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), str(tag), "3", "200"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for tag in range(3)
    ]
    assert procs[2].stdout is not None
    procs[2].stdout.readline()
    time.sleep(0.3)  # mid-write
    procs[2].send_signal(signal.SIGKILL)
    for i, p in enumerate(procs):
        _, err = p.communicate(timeout=120)
        assert p.returncode == (-signal.SIGKILL if i == 2 else 0), err.decode()


async def test_processes_writing_one_store_and_one_killed_mid_write_keep_counts_exact(
    tmp_path: Path,
) -> None:
    """A node's workers commit to one environment in turn; a worker killed with
    ``kill -9`` in the middle of its writes leaves counts that match the keys."""
    path = tmp_path / "db"
    await asyncio.to_thread(_write_from_processes, path)
    s = LmdbStore(path, map_size=MAP)
    await s.open()
    try:
        count = await _count(s, 4)
        assert count == await _scanned(s, 4)
        assert count >= 2 * 200 * (50 - 17)  # the two that finished
    finally:
        await s.close()


async def test_a_store_opened_without_counts_drops_them_and_the_next_counting_open_recounts(
    tmp_path: Path,
) -> None:
    """A lone node (``count_messages=False``) keeps no counts, and its writes would
    leave counts left by a node of workers stale: it drops them; the next node of
    workers counts the store again."""
    path = tmp_path / "db"
    s = LmdbStore(path, map_size=MAP)
    await s.open()
    await s.write_batch([Put(_msg(1, i), b"x") for i in range(10)])
    assert await s.message_counts([1]) == [10]
    await s.close()
    lone = LmdbStore(path, map_size=MAP, count_messages=False)
    await lone.open()
    try:
        assert await lone.message_counts([1]) is None
        await lone.write_batch([Put(_msg(1, i), b"x") for i in range(10, 15)])
        await lone.delete(_msg(1, 0))
    finally:
        await lone.close()
    s = LmdbStore(path, map_size=MAP, writer="process")
    await s.open()
    try:
        assert await s.message_counts([1]) == [14] == [await _scanned(s, 1)]
    finally:
        await s.close()
