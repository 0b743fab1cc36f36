"""What the Riak store adds to the contract: races between processes, siblings, the journal,
tombstones, bucket properties and error translation, against the session's real Riak."""

from __future__ import annotations

import asyncio
import time

import pytest

from dynaq.errors import InvalidInput, StorageUnavailable
from dynaq.storage import riak_layout as lay
from dynaq.storage.base import Delete, Op, Put
from dynaq.storage.riak import RiakStore
from dynaq.storage.riak_http import Content, _siblings
from dynaq.storage.riak_journal import Journal, decode, encode
from dynaq.testing.servers.riak import RiakServer
from tests.fixtures.riak import new_prefix, open_riak_store


def test_multipart_siblings_are_split_exactly() -> None:
    body = (
        b"\r\n--B1\r\nContent-Type: application/octet-stream\r\nX-Riak-Meta-Dq-V: 7\r\n\r\n"
        b"\x00\r\nbin\r\n--B1\r\nX-Riak-Deleted: true\r\n\r\n\r\n--B1--\r\n"
    )
    got = _siblings("multipart/mixed; boundary=B1", body)
    assert got[0] == Content(b"\x00\r\nbin", {"dq-v": "7"}, False)
    assert got[1].deleted and got[1].value == b""


def test_sibling_rule_deepest_lineage_then_oldest() -> None:
    a, b = lay.Sibling(b"a", 20, 10), lay.Sibling(b"b", 21, 10)
    assert lay.current([b, a]) == a  # same parent: the older write
    c = lay.Sibling(b"c", 30, 20)  # a write that read ``a``
    assert lay.current([b, c]) == c
    assert lay.won(30, [b, c]) and not lay.won(21, [a, b])
    # Undecided while two writes of the deepest lineage stand; a copy counts once.
    assert not lay.decided([a, b]) and lay.decided([b, c]) and lay.decided([a, a])
    assert lay.decided([]) and lay.decided([a])


def test_journal_entries_roundtrip() -> None:
    ops: list[Op] = [Put(b"k", b"\x00v"), Delete(b"m" * 13), Put(b"", b"")]
    assert decode(encode(ops)) == ops


async def test_conditional_increments_from_three_processes_lose_nothing(
    riak: RiakServer,
) -> None:
    """Three stores (as three dynaq processes: no shared lock) race put_if_version;
    Riak applies every PUT, siblings tell the losers."""
    prefix = new_prefix()
    stores = [await open_riak_store(riak, prefix) for _ in range(3)]
    try:
        await stores[0].put(b"ctr", b"0")
        wins = [0, 0, 0]

        async def incr(i: int) -> None:
            s = stores[i]
            while True:
                item = await s.get(b"ctr")
                assert item is not None
                if await s.put_if_version(b"ctr", str(int(item.value) + 1).encode(), item.version):
                    wins[i] += 1
                    return

        await asyncio.gather(*(incr(i % 3) for i in range(45)))
        item = await stores[1].get(b"ctr")
        assert item is not None and item.value == b"45" and sum(wins) == 45
    finally:
        for s in stores:
            await s.close()


async def test_put_if_absent_from_two_processes_has_one_winner(riak: RiakServer) -> None:
    prefix = new_prefix()
    a, b = await open_riak_store(riak, prefix), await open_riak_store(riak, prefix)
    try:
        for i in range(20):
            key = f"c/once/{i}".encode()
            ra, rb = await asyncio.gather(a.put_if_absent(key, b"a"), b.put_if_absent(key, b"b"))
            assert (ra is None) != (rb is None), (i, ra, rb)
            item = await a.get(key)
            assert item is not None and item.value == (b"a" if ra else b"b")
    finally:
        await a.close()
        await b.close()


async def test_write_after_delete_descends_from_the_tombstone(riak_store: RiakStore) -> None:
    await riak_store.put(b"c/q", b"one")
    assert await riak_store.delete(b"c/q")
    assert await riak_store.get(b"c/q") is None
    assert await riak_store.put_if_absent(b"c/q", b"two") is not None  # re-create
    item = await riak_store.get(b"c/q")
    assert item is not None and item.value == b"two"
    assert await riak_store.list_keys(b"c/", 10) == [b"c/q"]


async def test_a_crashed_batch_is_finished_by_the_next_open(riak: RiakServer) -> None:
    prefix = new_prefix()
    store = await open_riak_store(riak, prefix)
    try:
        await store.put(b"x/old", b"1")
        # A writer that journalled a batch and died before applying it.
        journal = Journal(store._db, f"{prefix}_jr", 0.0)
        await store._db.store(
            journal.bucket, "0000000000000001dead", encode([Put(b"x/new", b"2"), Delete(b"x/old")])
        )
    finally:
        await store.close()
    again = RiakStore([riak.http], bucket_prefix=prefix, n_val=1, journal_replay_after_s=0.0)
    await again.open()
    try:
        assert await again.list_keys(b"x/", 10) == [b"x/new"]
        names, _ = await again._db.index_page(f"{prefix}_jr", "$key", "0", "g", 10)
        for name in names:  # a listing may still show its tombstone for a few seconds
            assert (await again._db.fetch(f"{prefix}_jr", name)).live == []
    finally:
        await again.close()


async def test_a_batch_a_writer_left_is_finished_by_the_periodic_replay(
    riak: RiakServer,
) -> None:
    """No node has to start: the running store's periodic pass finishes it."""
    prefix = new_prefix()
    store = await open_riak_store(
        riak, prefix, journal_replay_after_s=0.0, journal_replay_every_s=0.2
    )
    try:
        await store.put(b"y/old", b"1")
        # Another node journalled this batch and died before applying it.
        await store._db.store(
            f"{prefix}_jr", "0000000000000002dead", encode([Put(b"y/new", b"2"), Delete(b"y/old")])
        )
        deadline = time.monotonic() + 10
        while await store.list_keys(b"y/", 10) != [b"y/new"]:
            assert time.monotonic() < deadline, "the periodic replay never finished the batch"
            await asyncio.sleep(0.1)
    finally:
        await store.close()


async def test_migrate_sets_bucket_properties(riak: RiakServer) -> None:
    store = RiakStore([riak.http], bucket_prefix=new_prefix(), n_val=1)
    await store.open()
    try:
        assert await store.migrate_schema() is True
        assert await store.migrate_schema() is False
        props = await store._db.props(store._kv)
        assert props is not None and props["allow_mult"] is True and props["n_val"] == 1
    finally:
        await store.close()


async def test_missing_bucket_type_and_dead_listener_are_clear_errors(riak: RiakServer) -> None:
    store = RiakStore([riak.http], bucket_prefix=new_prefix(), bucket_type="nope", n_val=1)
    with pytest.raises(InvalidInput, match="bucket-type create nope"):
        await store.open()
    from dynaq.testing.process import free_port

    dead = RiakStore([f"127.0.0.1:{free_port()}"], bucket_prefix=new_prefix())
    await dead._db.open()
    try:
        with pytest.raises(StorageUnavailable):
            await dead.get(b"k")
    finally:
        await dead.close()
