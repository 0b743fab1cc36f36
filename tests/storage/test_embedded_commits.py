"""The embedded store's writer: how writes reach the commit thread and come back.

Concurrent single writes made in one event-loop iteration share one commit;
writes queued at close are committed or refused, never left waiting; the
disk-space check asks the file system rarely far from the reserve and on
every commit near it.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from dynaq.errors import InsufficientStorage, StorageUnavailable
from dynaq.storage import embedded_commits, embedded_reserve
from dynaq.storage.base import Put
from dynaq.storage.embedded import LmdbStore

MAP = 64 * 1024**2


def _message(i: int) -> bytes:
    return b"m" + (1).to_bytes(4, "big") + i.to_bytes(8, "big")


async def test_single_writes_of_one_loop_iteration_share_one_commit(tmp_path: Path) -> None:
    s = LmdbStore(tmp_path / "db", map_size=MAP, min_free_disk=0)
    await s.open()
    try:
        await s.put(b"warm", b"up")
        before = s.commits
        # gather() starts all 16 in one iteration, as one wake-up of a busy
        # node's loop handles 16 requests: one commit answers them all.
        versions = await asyncio.gather(*(s.put(b"k%02d" % i, b"v") for i in range(16)))
        assert s.commits - before == 1
        assert len(set(versions)) == 16  # each put still gets its own version
        assert len(await s.list_keys(b"k", 100)) == 16
    finally:
        await s.close()


async def test_after_a_group_the_writer_waits_briefly_for_its_callers_to_return(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A long window, so the test does not race the machine's scheduler.
    monkeypatch.setattr(embedded_commits, "_GATHER_S", 2.0)
    s = LmdbStore(tmp_path / "db", map_size=MAP, min_free_disk=0)
    await s.open()
    try:
        await asyncio.gather(*(s.put(b"g%d" % i, b"v") for i in range(4)))  # a group of 4
        before = s.commits
        first = asyncio.ensure_future(s.put(b"a", b"v"))
        await asyncio.sleep(0.05)  # a caller coming back later, within the window
        await asyncio.gather(first, s.put(b"b", b"v"))
        assert s.commits - before == 1
    finally:
        await s.close()


async def test_a_lone_caller_never_waits_for_company(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedded_commits, "_GATHER_S", 2.0)
    s = LmdbStore(tmp_path / "db", map_size=MAP, min_free_disk=0)
    await s.open()
    try:
        await s.put(b"warm", b"up")  # the last group was one caller
        loop = asyncio.get_running_loop()
        started = loop.time()
        for i in range(5):
            await s.put(b"k%d" % i, b"v")
        assert loop.time() - started < 1.0  # no put waited out the 2 s window
    finally:
        await s.close()


async def test_one_commit_applies_its_writes_in_the_order_they_were_made(tmp_path: Path) -> None:
    s = LmdbStore(tmp_path / "db", map_size=MAP, min_free_disk=0)
    await s.open()
    try:
        await s.put(b"warm", b"up")
        before = s.commits
        # Runs of puts go to LMDB together; a delete between them must still
        # see the put before it, and the put after it must win.
        results = await asyncio.gather(
            s.write_batch([Put(b"a", b"1"), Put(b"b", b"1")]),
            s.put(b"c", b"1"),
            s.delete(b"a"),
            s.write_batch([Put(b"a", b"2")]),
            s.delete(b"c"),
            s.put(b"b", b"2"),
        )
        assert s.commits - before == 1
        assert results[2] is True and results[4] is True
        a, b, c = await s.get_many([b"a", b"b", b"c"])
        assert a is not None and a.value == b"2"
        assert b is not None and b.value == b"2"
        assert c is None
    finally:
        await s.close()


async def test_writes_queued_when_the_store_closes_are_committed(tmp_path: Path) -> None:
    s = LmdbStore(tmp_path / "db", map_size=MAP, min_free_disk=0)
    await s.open()
    writes = [asyncio.ensure_future(s.put(b"k%02d" % i, b"v")) for i in range(8)]
    await asyncio.sleep(0)  # the puts are submitted, not yet handed to the thread
    await s.close()
    assert all(isinstance(v, int) for v in await asyncio.gather(*writes))
    s2 = LmdbStore(tmp_path / "db", map_size=MAP, min_free_disk=0)
    await s2.open()
    try:
        assert len(await s2.list_keys(b"k", 100)) == 8
    finally:
        await s2.close()
    with pytest.raises(StorageUnavailable):
        await s.put(b"late", b"v")


async def test_a_commit_larger_than_max_commit_ops_is_split(tmp_path: Path) -> None:
    s = LmdbStore(tmp_path / "db", map_size=MAP, min_free_disk=0, max_commit_ops=4)
    await s.open()
    try:
        await s.put(b"warm", b"up")
        before = s.commits
        await asyncio.gather(*(s.put(b"k%02d" % i, b"v") for i in range(10)))
        assert s.commits - before == 3  # 4 + 4 + 2
        assert len(await s.list_keys(b"k", 100)) == 10
    finally:
        await s.close()


class _Statvfs:
    """``os.statvfs`` with a chosen free space, counting its calls."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.calls = 0
        self._real = os.statvfs

    def __call__(self, path: Any) -> Any:
        self.calls += 1
        real = self._real(path)
        return os.statvfs_result((real.f_bsize, 1, real.f_blocks, self.free, self.free, *real[5:]))


async def test_free_disk_is_asked_rarely_far_from_the_reserve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _Statvfs(free=100 * 1024**3)
    monkeypatch.setattr(os, "statvfs", fake)
    s = LmdbStore(tmp_path / "db", map_size=MAP, min_free_disk=64 * 1024**2)
    await s.open()
    try:
        for i in range(20):
            await s.write_batch([Put(_message(i), b"x" * 300)])
        assert fake.calls == 1
    finally:
        await s.close()


async def test_near_the_reserve_every_commit_asks_and_is_refused_in_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reserve = 64 * 1024**2
    fake = _Statvfs(free=reserve + embedded_reserve._DISK_NEAR_BYTES // 2)
    monkeypatch.setattr(os, "statvfs", fake)
    s = LmdbStore(tmp_path / "db", map_size=MAP, min_free_disk=reserve)
    await s.open()
    try:
        for i in range(5):
            await s.write_batch([Put(_message(i), b"x" * 300)])
        assert fake.calls == 5
        fake.free = reserve // 2  # another writer filled the disk
        with pytest.raises(InsufficientStorage):
            await s.write_batch([Put(_message(99), b"x" * 300)])
    finally:
        await s.close()
