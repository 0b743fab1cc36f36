"""The Cassandra store against a real Cassandra: data layout, scans across
lanes, queues and tables (checked against the in-memory twin), errors, and
the tombstone / batch throughput figures (``-s`` prints them)."""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

import pytest

from dynaq.core import keys
from dynaq.core.ids import LANE_SHIFT, MAX_ID, lane_start
from dynaq.errors import InvalidInput, StorageUnavailable
from dynaq.storage.base import Delete, Op, Put, Store
from dynaq.storage.memory import MemoryStore
from dynaq.testing.process import free_port
from dynaq.testing.servers.cassandra import CassandraServer
from tests.fixtures.cassandra import new_keyspace

if os.environ.get("CI") != "true":  # in CI a missing driver must fail, not skip
    pytest.importorskip("cassandra")

from dynaq.storage.cassandra import CassandraStore


async def _raw(store: CassandraStore, cql: str, *params: Any) -> list[Any]:
    return await store._run(cql, params or None)


async def test_message_keys_go_to_lane_partitions(cassandra_store: CassandraStore) -> None:
    s = cassandra_store
    mid = lane_start(700) + 12345
    await s.put(keys.message(7, mid), b"hello")
    rows = await _raw(s, f'SELECT queue, lane, id, value FROM "{s.keyspace}".messages')
    assert rows == [(7, 700, mid, b"hello")]
    # Rows carry no row marker and deletes are cell tombstones (see the module docs).
    await s.delete(keys.message(7, mid))
    assert await _raw(s, f'SELECT id FROM "{s.keyspace}".messages') == []
    await s.put(keys.message(7, mid), b"hello")
    assert await _raw(s, f'SELECT k FROM "{s.keyspace}".kv') == []
    await s.put(b"c/q/name", b"cfg")
    assert await _raw(s, f'SELECT p, k FROM "{s.keyspace}".kv') == [(ord("c"), b"c/q/name")]


async def test_messages_table_schema(cassandra_store: CassandraStore) -> None:
    s = cassandra_store
    meta = s.metadata.keyspaces[s.keyspace].tables["messages"]
    assert meta.options["gc_grace_seconds"] == 900
    assert [c.name for c in meta.partition_key] == ["queue", "lane"]
    assert [c.name for c in meta.clustering_key] == ["id"]


async def test_queue_scan_crosses_lanes_in_order(cassandra_store: CassandraStore) -> None:
    s = cassandra_store
    ids = sorted(
        [lane_start(lane) + off for lane in (0, 3, 511, 1023) for off in (0, 7, 1 << 40)] + [MAX_ID]
    )
    await s.write_batch([Put(keys.message(2, i), i.to_bytes(8, "big")) for i in ids])
    await s.put(keys.message(1, 5), b"other queue")
    await s.put(keys.message(3, 5), b"other queue")
    start, end = keys.queue_messages(2)
    rows = await s.scan(start, end, 100)
    assert [keys.message_id(k) for k, _ in rows] == ids
    assert all(v == keys.message_id(k).to_bytes(8, "big") for k, v in rows)
    # limits and starts inside a lane, across empty lanes
    rows = await s.scan(keys.message(2, ids[1]), end, 5)
    assert [keys.message_id(k) for k, _ in rows] == ids[1:6]
    rows = await s.scan(keys.message(2, lane_start(4)), keys.message(2, lane_start(1023) + 7), 100)
    assert [keys.message_id(k) for k, _ in rows] == [i for i in ids if i >= 4 << LANE_SHIFT][:4]
    # list_keys over the queue prefix pages through every lane
    got: list[bytes] = []
    after = None
    while True:
        page = await s.list_keys(start, 4, after)
        got += page
        if len(page) < 4:
            break
        after = page[-1]
    assert [keys.message_id(k) for k in got] == ids


async def test_scans_match_memory_store(cassandra_store: CassandraStore) -> None:
    """Random keys of every shape, random ranges: same answers as the in-memory twin."""
    rng = random.Random(7)
    mem = MemoryStore()
    await mem.open()

    def rand_key() -> bytes:
        kind = rng.randrange(6)
        if kind == 0:
            return keys.message(rng.choice([0, 1, 2, 0xFFFFFFFF]), rng.randrange(MAX_ID + 1))
        if kind == 1:  # "m" keys that are not message keys
            return b"m" + rng.randbytes(rng.randrange(0, 16))
        if kind == 2:
            return b"m" + rng.randbytes(4) + bytes([0x80 | rng.randrange(128)]) + rng.randbytes(7)
        if kind == 3:
            return rng.choice([b"", b"\x00", b"\xff", b"c/q/a", b"d/x"])
        return rng.randbytes(rng.randrange(1, 6))

    ops = [Put(rand_key(), rng.randbytes(3)) for _ in range(200)]
    for store in (mem, cassandra_store):
        await store.write_batch(ops)
    doomed = [Delete(op.key) for op in ops[::3]] + [Delete(b"never-written")]
    assert await cassandra_store.write_batch(doomed) == await mem.write_batch(doomed)
    bounds = [rand_key() for _ in range(30)] + [b"", b"m", b"n", b"\xff" * 20]
    for _ in range(20):
        a, b = rng.choice(bounds), rng.choice(bounds)
        limit = rng.choice([1, 3, 50, 1000])
        assert await cassandra_store.scan(a, b, limit) == await mem.scan(a, b, limit), (a, b)
        prefix = a[: rng.randrange(0, 3)]
        assert await cassandra_store.list_keys(prefix, limit) == await mem.list_keys(prefix, limit)
    all_keys = [op.key for op in ops]
    got = await cassandra_store.get_many(all_keys)
    want = await mem.get_many(all_keys)
    assert [i.value if i else None for i in got] == [i.value if i else None for i in want]


async def test_versions_increase_and_are_unique(cassandra_store: CassandraStore) -> None:
    s = cassandra_store
    v1 = await s.put(b"c/x", b"1")
    v2 = await s.put(keys.message(1, 1), b"1")
    v3 = await s.put(b"c/x", b"2")
    assert v1 < v2 < v3
    item = await s.get(b"c/x")
    assert item is not None and item.version == v3
    v4 = await s.put_if_version(b"c/x", b"3", v3)
    assert v4 is not None and v4 > v3
    for key in (keys.message(1, 2), b"c/y"):
        assert await s.put_if_absent(key, b"m") is not None
        assert await s.put_if_absent(key, b"m") is None
        assert await s.delete(key) is True
        assert await s.get(key) is None
        assert await s.put_if_absent(key, b"again") is not None
        item = await s.get(key)
        assert item is not None and item.value == b"again"
        # A plain (batch) delete leaves the conditional insert's row marker:
        # the key still reads as absent and can be created again.
        assert await s.write_batch([Delete(key)]) == [True]
        assert await s.get(key) is None
        assert await s.list_keys(key, 10) == []
        assert await s.put_if_version(key, b"x", item.version) is None
        assert await s.put_if_absent(key, b"third") is not None


async def test_multi_partition_batch_is_applied_whole(cassandra_store: CassandraStore) -> None:
    s = cassandra_store
    await s.put(keys.message(1, lane_start(9)), b"old")
    ops: list[Op] = [Put(keys.message(1, lane_start(lane)), b"new") for lane in range(8)]
    ops += [Delete(keys.message(1, lane_start(9))), Put(b"c/purge/x", b""), Delete(b"c/none")]
    res = await s.write_batch(ops)
    assert res == [True] * 8 + [True, True, False]
    assert len(await s.list_keys(b"m" + (1).to_bytes(4, "big"), 100)) == 8


async def test_a_node_with_its_clock_behind_still_deletes_and_overwrites(
    cassandra: CassandraServer,
) -> None:
    """Regression (tests/faults, clock skew): write timestamps are the coordinator's.

    With the driver's client-side timestamps a node whose clock was an hour
    behind wrote tombstones older than the messages it deleted: its deletes
    (and its puts over newer values, such as id high-water marks) silently
    did nothing.
    """
    keyspace = new_keyspace()
    ahead, behind = (CassandraStore([cassandra.host], keyspace=keyspace) for _ in range(2))
    await ahead.open()
    await behind.open()
    try:
        hour_us = 3600 * 1_000_000
        cluster = behind._db._cluster
        clock = cluster.timestamp_generator
        cluster.timestamp_generator = lambda: clock() - hour_us  # its clock: -1 h
        message = keys.message(1, lane_start(3) + 32)
        await ahead.put(message, b"body")
        assert await behind.write_batch([Delete(message)]) == [True]
        assert await ahead.get(message) is None  # the delete took effect
        await ahead.put(b"c/mark", b"1")
        await behind.put(b"c/mark", b"2")
        item = await ahead.get(b"c/mark")
        assert item is not None and item.value == b"2"  # the later put won
    finally:
        await ahead.close()
        await behind.close()


async def test_expiring_prefixes_are_removed_by_cassandra_itself(
    cassandra: CassandraServer,
) -> None:
    """Dedup records (``d/``) are written with a TTL: their window is timed by
    Cassandra's clock, not by the clocks of the nodes that write and read them."""
    ttl = 3
    s = CassandraStore([cassandra.host], keyspace=new_keyspace(), expire_prefixes={b"d/": ttl})
    await s.open()
    try:
        assert s.expires_itself(b"d/x") and not s.expires_itself(b"c/x")
        assert not s.expires_itself(keys.message(1, 5))
        written = time.monotonic()
        await s.write_batch([Put(b"d/x", b"1"), Put(b"c/x", b"1")])
        await s.put(b"d/y", b"2")
        present = [await s.get(b"d/x"), await s.get(b"d/y")]
        # Cassandra keeps expiry times in whole seconds (the write's second,
        # floored, plus the TTL, on its own clock), so a row lives between
        # TTL - 1 and TTL seconds: read within TTL - 1, both are there.
        assert time.monotonic() - written < ttl - 1, "the writes took longer than the TTL"
        assert None not in present
        gone_at = None
        while time.monotonic() - written < ttl + 15:
            if await s.get(b"d/x") is None and await s.get(b"d/y") is None:
                gone_at = time.monotonic() - written
                break
            await asyncio.sleep(0.25)
        assert gone_at is not None and gone_at >= ttl - 1, gone_at
        assert await s.get(b"c/x") is not None
    finally:
        await s.close()


async def test_delete_range_spanning_lanes(cassandra_store: CassandraStore) -> None:
    s = cassandra_store
    await s.write_batch(
        [
            Put(keys.message(4, lane_start(lane) + i), b"x")
            for lane in (1, 2, 900)
            for i in range(30)
        ]
    )
    await s.put(keys.message(5, 1), b"keep")
    assert await s.delete_range(*keys.queue_messages(4), chunk=25) == 90
    assert await s.scan(*keys.queue_messages(4), 10) == []
    assert await s.get(keys.message(5, 1)) is not None


async def test_unreachable_cluster_is_storage_unavailable() -> None:
    s = CassandraStore([f"127.0.0.1:{free_port()}"], keyspace="nowhere", connect_timeout_s=2.0)
    with pytest.raises(StorageUnavailable):
        await s.open()
    with pytest.raises(StorageUnavailable):
        await s.get(b"x")


def test_bad_settings_are_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        CassandraStore(["127.0.0.1:9042"], keyspace="no-dashes")
    with pytest.raises(InvalidInput):
        CassandraStore(["127.0.0.1:port"])


async def test_event_loop_stays_responsive(cassandra_store: CassandraStore) -> None:
    """Queries run on the driver's reactor: the loop keeps ticking meanwhile."""
    lags: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            t = time.monotonic()
            await asyncio.sleep(0.005)
            lags.append(time.monotonic() - t - 0.005)

    task = asyncio.create_task(ticker())
    try:
        await asyncio.gather(*(cassandra_store.put(b"k" + bytes([i]), b"v") for i in range(200)))
        await cassandra_store.scan(b"k", b"l", 1000)
    finally:
        stop.set()
        await task
    # A query run on the loop would stall it for the whole burst; one scheduling
    # hiccup on a busy 2-core machine is not that (it made this test flaky: CI
    # once saw 1.1 s among ten ticks, which a 90th percentile of ten cannot
    # tell from a stall). So the typical tick is judged (the median, which one
    # hiccup cannot move), and the worst only against a whole-burst stall.
    assert len(lags) >= 2, lags
    lags.sort()
    assert lags[(len(lags) - 1) // 2] < 0.05, lags
    assert lags[-1] < 2.0, lags[-5:]


async def _enqueue(s: Store, queue: int, lanes: range, per_lane: int, batch: int) -> list[int]:
    ids: list[int] = []
    body = b"x" * 200
    for lane in lanes:
        lane_ids = [lane_start(lane) + (i << 13) for i in range(per_lane)]
        ids += lane_ids
        for i in range(0, per_lane, batch):
            await s.write_batch(
                [Put(keys.message(queue, m), body) for m in lane_ids[i : i + batch]]
            )
    return ids


@pytest.mark.slow
@pytest.mark.parametrize("gc_grace_s", [900, 0])
async def test_figures_batch_throughput_and_scans_over_tombstones(
    cassandra: CassandraServer, gc_grace_s: int
) -> None:
    """Put-batch throughput, then a queue-like workload (delete the head of
    every lane) and the time to scan past the tombstones, before and after a
    flush and a major compaction. Bounded: 60,000 messages."""
    s = CassandraStore([cassandra.host], keyspace=new_keyspace(), messages_gc_grace_s=gc_grace_s)
    await s.open()
    try:
        lanes, per_lane, batch = range(8), 5000, 100
        t = time.monotonic()
        ids = await _enqueue(s, 1, lanes, per_lane, batch)
        put_s = time.monotonic() - t
        print(
            f"\nput: {len(ids)} msgs in batches of {batch}, one at a time: {len(ids) / put_s:,.0f} msgs/s"
        )
        t = time.monotonic()
        more = await asyncio.gather(
            *(_enqueue(s, 2, range(lane, lane + 1), 2500, batch) for lane in range(8))
        )
        n = sum(len(m) for m in more)
        print(
            f"put: {n} msgs in batches of {batch}, 8 concurrent: {n / (time.monotonic() - t):,.0f} msgs/s"
        )
        # Consumers delete all but the last 10 messages of every lane.
        t = time.monotonic()
        doomed = [m for lane in lanes for m in ids[lane * per_lane : (lane + 1) * per_lane - 10]]
        await asyncio.gather(
            *(
                s.write_batch([Delete(keys.message(1, m)) for m in doomed[i : i + 500]])
                for i in range(0, len(doomed), 500)
            )
        )
        print(f"delete: {len(doomed) / (time.monotonic() - t):,.0f} msgs/s (read + batch)")
        start, end = keys.queue_messages(1)

        async def timed_scan(label: str) -> None:
            t = time.monotonic()
            rows = await s.scan(start, end, 100)
            ms = (time.monotonic() - t) * 1000
            assert len(rows) == 80 and all(keys.message_id(k) in ids for k, _ in rows)
            print(f"scan past {len(doomed)} tombstones ({label}): {ms:.0f} ms for 80 live rows")

        await timed_scan("memtable")
        await asyncio.to_thread(cassandra.jmx, "forceKeyspaceFlush", s.keyspace, "messages")
        await timed_scan("flushed")
        await asyncio.to_thread(cassandra.jmx, "forceKeyspaceCompaction", s.keyspace, "messages")
        await timed_scan(f"compacted, gc_grace_seconds={gc_grace_s}")
        t = time.monotonic()
        mid = keys.message(1, ids[per_lane - 10])
        rows = await s.scan(mid, end, 10)
        print(f"scan from a cursor past the head: {(time.monotonic() - t) * 1000:.1f} ms")
        assert len(rows) == 10
        t = time.monotonic()
        for m in ids[:200]:
            await s.get(keys.message(1, m))
        print(f"get: {(time.monotonic() - t) / 200 * 1000:.2f} ms each, sequential")
        # Created conditionally: the store never mixes plain and LWT writes on one key.
        created = await s.put_if_absent(b"c/ctr", b"0")
        assert created is not None
        v = created
        t = time.monotonic()
        for i in range(50):
            nv = await s.put_if_version(b"c/ctr", str(i).encode(), v)
            assert nv is not None
            v = nv
        print(f"put_if_version (LWT): {(time.monotonic() - t) / 50 * 1000:.2f} ms each")
    finally:
        await s.close()


async def test_node_serves_a_queue_on_cassandra(cassandra: CassandraServer, tmp_path: Any) -> None:
    """A whole node on the Cassandra store: create, enqueue, receive, delete."""
    import aiohttp

    from dynaq.clock import ManualClock
    from dynaq.node import Node
    from tests.fixtures.nodes import node_config

    store = CassandraStore([cassandra.host], keyspace=new_keyspace())
    node = Node(node_config(tmp_path), clock=ManualClock(), store=store)
    await node.start()
    try:
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{node.port}") as http:
            async with http.put("/v1/queues/q1") as r:
                assert r.status == 201
            sent = []
            for i in range(30):
                async with http.put("/v1/queues/q1/message", data=f"m{i}".encode()) as r:
                    assert r.status == 200
                    sent.append(await r.text())
            got: list[dict[str, str]] = []
            for _ in range(10):
                async with http.get("/v1/queues/q1/messages/10") as r:
                    got += await r.json()
                if len(got) >= 30:
                    break
            assert sorted(m["id"] for m in got) == sorted(sent)
            for m in got:
                async with http.delete(f"/v1/queues/q1/message/{m['id']}") as r:
                    assert await r.json() is True
            async with http.get("/v1/queues/q1/messages/10") as r:
                assert await r.json() == []
            async with http.delete("/v1/queues/q1") as r:
                assert r.status == 200
    finally:
        await node.stop()


async def test_start_up_states_what_the_replication_factor_promises(
    cassandra: CassandraServer, cassandra_store: CassandraStore, caplog: pytest.LogCaptureFixture
) -> None:
    assert cassandra_store.replication()["replication_factor"] == "1"
    again = CassandraStore(
        [cassandra.host], keyspace=cassandra_store.keyspace, replication_factor=3
    )
    with caplog.at_level("WARNING", logger="dynaq.storage.cassandra_session"):
        await again.open()
    try:
        text = " ".join(r.getMessage() for r in caplog.records)
        assert "another replication factor than configured" in text
        assert "below 3" in text
    finally:
        await again.close()
