"""The embedded store when it fills up: message writes get 507, deletes keep a reserve."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dynaq.errors import InsufficientStorage, StorageError
from dynaq.storage.base import Delete, Put
from dynaq.storage.embedded import LmdbStore

MAP = 2 * 1024 * 1024


def _key(i: int) -> bytes:
    return b"m" + (1).to_bytes(4, "big") + i.to_bytes(8, "big")


async def _fill(s: LmdbStore, batch: int = 20, start: int = 0, limit: int = 100_000) -> int:
    """Write message batches (ids ascending from ``start``, as a lane fills) until the
    store refuses one; return how many were written."""
    n = 0
    with pytest.raises(InsufficientStorage) as refused:
        while n < limit:
            await s.write_batch([Put(_key(start + n + j), os.urandom(300)) for j in range(batch)])
            n += batch
    assert refused.value.status == 507 and refused.value.code == "insufficient_storage"
    assert refused.value.retriable and isinstance(refused.value, StorageError)
    return n


async def test_a_full_store_refuses_message_writes_but_deletes_drain_it(tmp_path: Path) -> None:
    s = LmdbStore(tmp_path / "db", map_size=MAP, min_free_disk=0)
    await s.open()
    try:
        n = await _fill(s)
        assert n * 300 > MAP * 0.6  # it did fill most of the map
        await s.put(b"c/small", b"x" * 64)  # small records use the reserve
        # Deletes drain it (in consumer-sized batches), then writes succeed again.
        for lo in range(0, n, 100):
            done = await s.write_batch([Delete(_key(i)) for i in range(lo, min(n, lo + 100))])
            assert all(done)
        await s.write_batch([Put(_key(10**6 + j), os.urandom(300)) for j in range(100)])
        # and it fills again to about the same level: freed pages are reused
        again = await _fill(s, start=2 * 10**6)
        assert again >= n * 0.9
    finally:
        await s.close()


async def test_one_big_delete_of_a_full_store_succeeds(tmp_path: Path) -> None:
    s = LmdbStore(tmp_path / "db", map_size=MAP, min_free_disk=0)
    await s.open()
    try:
        n = await _fill(s, batch=1)
        assert sum(await s.write_batch([Delete(_key(i)) for i in range(n)])) == n
    finally:
        await s.close()


async def test_a_map_full_error_is_a_507(tmp_path: Path) -> None:
    """Records that are not messages are never refused early; LMDB's own MapFullError
    at the very end of the map is answered as InsufficientStorage too."""
    s = LmdbStore(tmp_path / "db", map_size=MAP, min_free_disk=0)
    await s.open()
    try:
        with pytest.raises(InsufficientStorage, match="map is full"):
            for i in range(100_000):
                await s.write_batch([Put(b"c/%d" % (i * 20 + j), b"x" * 300) for j in range(20)])
    finally:
        await s.close()


async def test_new_records_under_growth_prefixes_are_refused_but_overwrites_are_not(
    tmp_path: Path,
) -> None:
    """Batch records (new keys under a growth prefix) cannot eat the reserve:
    once they fill the store, a delete of a message still commits, and so does an
    overwrite of an existing batch record (an ack)."""
    s = LmdbStore(tmp_path / "db", map_size=MAP, min_free_disk=0, growth_prefixes=(b"b/g/",))
    await s.open()
    try:
        await s.write_batch([Put(_key(i), os.urandom(300)) for i in range(20)])
        n = 0
        with pytest.raises(InsufficientStorage):
            while n < 100_000:
                await s.put(b"b/g/%08d" % n, os.urandom(300))
                n += 1
        assert n * 300 > MAP * 0.4  # one commit each: pages fill less than in batches
        await s.put(b"b/g/%08d" % 0, os.urandom(300))  # an ack rewrites a block: allowed
        assert all(await s.write_batch([Delete(_key(i)) for i in range(20)]))
        await s.put(b"c/small", b"x" * 64)  # small records still use the reserve
    finally:
        await s.close()


async def test_records_under_added_prefixes_count_whether_new_or_not(tmp_path: Path) -> None:
    """Dedup records (an added prefix) are written once, with their messages: every
    put of one counts against the limit, a rewrite of an old key too (the store does
    not read the key to tell), while a growth prefix's overwrite still passes."""
    s = LmdbStore(
        tmp_path / "db", map_size=MAP, min_free_disk=0,
        growth_prefixes=(b"b/g/",), added_prefixes=(b"d/",),
    )  # fmt: skip
    await s.open()
    try:
        await s.put(b"d/old", b"x" * 64)
        await s.put(b"b/g/old", b"x" * 64)
        n = await _fill(s)
        assert n > 0
        # Bigger than the room a refused batch of 20 messages left.
        with pytest.raises(InsufficientStorage):
            await s.put(b"d/new", b"x" * 8000)
        with pytest.raises(InsufficientStorage):
            await s.put(b"d/old", b"y" * 8000)
        assert (await s.get(b"d/old")).value == b"x" * 64  # type: ignore[union-attr]
        await s.put(b"b/g/old", b"y" * 8000)  # an ack's overwrite: allowed
        await s.put(b"c/small", b"x" * 64)
    finally:
        await s.close()
