"""A real cluster: 3 node processes on one Cassandra keyspace, HAProxy in front.

Needs the session's Cassandra (``tests/fixtures/cassandra.py``) and Debian's
haproxy. ``-s`` prints the measured figures (duplicates, failure detection,
time until a dead node's slice is served again, config sync delay).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import aiohttp
import pytest

from dynaq.testing.cluster import (
    HaproxyProcess,
    LocalCluster,
    http_get,
)
from dynaq.testing.servers.cassandra import CassandraServer
from tests.fixtures.cassandra import new_keyspace
from tests.fixtures.ring import SYNC_S

LANE_SHIFT = 53


async def _json(s: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> tuple[int, Any]:
    async with s.request(method, url, **kw) as r:
        return r.status, await r.json(content_type=None)


async def _create_everywhere(
    s: aiohttp.ClientSession, cluster: LocalCluster, lb: HaproxyProcess, queue: str
) -> None:
    status, _ = await _json(s, "PUT", f"{lb.url}/v1/queues/{queue}")
    assert status == 201
    deadline = time.monotonic() + SYNC_S * 5
    while time.monotonic() < deadline:  # every node loads it within the sync interval
        if await asyncio.to_thread(
            lambda: all(http_get(f"{u}/v1/queues/{queue}")[0] == 200 for u in cluster.urls)
        ):
            return
        await asyncio.sleep(0.1)
    raise AssertionError("queue config did not reach every node")


async def test_config_patched_on_one_node_applies_on_all(
    ring: tuple[LocalCluster, HaproxyProcess],
) -> None:
    cluster, lb = ring
    async with aiohttp.ClientSession() as s:
        await _create_everywhere(s, cluster, lb, "cfg")
        first, *others = cluster.nodes
        t0 = time.monotonic()
        status, _ = await _json(
            s, "PATCH", f"{first.url}/v1/queues/cfg", json={"visibility_timeout": 7}
        )
        assert status == 200
        pending = {n.name for n in others}
        while pending and time.monotonic() - t0 < SYNC_S * 5:
            for n in others:
                _, q = await _json(s, "GET", f"{n.url}/v1/queues/cfg")
                if q["VisibilityTimeout"] == 7:
                    pending.discard(n.name)
            await asyncio.sleep(0.05)
        took = time.monotonic() - t0
    assert not pending, f"{pending} never saw the PATCH"
    assert took <= SYNC_S * 2 + 1.0  # one sync interval, plus a loaded machine's slack
    print(f"\nconfig PATCH reached every node in {took:.2f} s (sync interval {SYNC_S} s)")


@pytest.mark.slow
async def test_kill_a_node_mid_consumption_loses_nothing(
    ring: tuple[LocalCluster, HaproxyProcess],
) -> None:
    cluster, lb = ring
    total = 10_000
    victim = cluster.node("dynaq-2")
    survivor = cluster.node("dynaq-1")
    lo, hi = await asyncio.to_thread(victim.partition_range)
    victim_lanes = range(lo >> LANE_SHIFT, (hi >> LANE_SHIFT) + 1)
    async with aiohttp.ClientSession() as s:
        await _create_everywhere(s, cluster, lb, "q")
        ids: list[int] = []
        for b in range(total // 1000):
            msgs = [{"body": f"m{b * 1000 + i}"} for i in range(1000)]
            base = victim.url if b == 0 else lb.url  # one batch straight to the victim
            status, out = await _json(
                s, "POST", f"{base}/v2/queues/q/messages", json={"messages": msgs}
            )
            assert status == 200, out
            ids += [int(i) for i in out["ids"]]
        victim_slot = ids[0] & 31
        assert len(set(ids)) == total
        assert len({i & 31 for i in ids}) == 3  # three nodes, three writer slots

        received: Counter[int] = Counter()
        deleted: set[int] = set()
        errors = 0
        marks: dict[str, float] = {}
        deadline = time.monotonic() + 90

        async def consume() -> None:
            # Four consumers at once, so the victim has messages in flight when it dies.
            nonlocal errors
            while len(deleted) < total and time.monotonic() < deadline:
                if "killed" not in marks and len(deleted) >= total * 3 // 10:
                    marks["killed"] = time.monotonic()
                    await asyncio.to_thread(victim.kill)
                try:
                    status, batch = await _json(s, "GET", f"{lb.url}/v1/queues/q/messages/100")
                    if status != 200:
                        errors += 1
                        continue
                    got = [int(m["id"]) for m in batch]
                    received.update(got)
                    if not got:
                        await asyncio.sleep(0.05)
                        continue
                    if "detected" in marks and any((i >> LANE_SHIFT) in victim_lanes for i in got):
                        marks.setdefault("served_again", time.monotonic())
                    joined = ",".join(map(str, got))
                    # A delete answered 503 (its node, or a peer it asked, died under
                    # it) has an unknown outcome: a consumer retries it, as one would.
                    while time.monotonic() < deadline:
                        status, _ = await _json(
                            s, "DELETE", f"{lb.url}/v1/queues/q/messages/{joined}"
                        )
                        if status == 200:
                            deleted.update(got)
                            break
                        errors += 1
                        await asyncio.sleep(0.1)
                except (aiohttp.ClientError, TimeoutError):
                    errors += 1

        async def watch() -> None:
            while "detected" not in marks and time.monotonic() < deadline:
                if "killed" in marks and "dynaq-2" not in await asyncio.to_thread(survivor.servers):
                    marks["detected"] = time.monotonic()
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch())
        await asyncio.gather(*(consume() for _ in range(4)))
        watcher.cancel()
        killed_at = marks.get("killed")
        detected_at = marks.get("detected")
        served_again_at = marks.get("served_again")
        assert killed_at is not None
        missing = set(ids) - deleted
        assert not missing, f"{len(missing)} messages never received and deleted"
        assert set(received) == set(ids)
        # nothing is left: every id is gone from the store
        for k in range(0, total, 200):
            joined = ",".join(map(str, ids[k : k + 200]))
            status, left = await _json(s, "GET", f"{lb.url}/v1/queues/q/message/{joined}")
            assert status == 200 and left["messages"] == [], left
        # the victim restarts: it rejoins, takes its slice back and keeps its writer slot
        t0 = time.monotonic()
        await asyncio.to_thread(cluster.start_node, victim)
        await asyncio.to_thread(cluster.wait_converged, ["dynaq-1", "dynaq-2", "dynaq-3"], 30)
        rejoin_s = time.monotonic() - t0
        assert await asyncio.to_thread(victim.partition_range) == (lo, hi)
        status, out = await _json(
            s, "POST", f"{victim.url}/v2/queues/q/messages", json={"messages": [{"body": "x"}]}
        )
        assert status == 200 and int(out["ids"][0]) & 31 == victim_slot
    duplicates = sum(received.values()) - len(received)
    assert killed_at is not None
    detect = f"{detected_at - killed_at:.2f} s" if detected_at else "n/a"
    again = f"{served_again_at - killed_at:.2f} s" if served_again_at else "n/a"
    print(
        f"\n{total} messages through HAProxy, kill -9 after 30%: lost 0, duplicates {duplicates}, "
        f"failed requests {errors}; failure detected {detect}, dead node's slice served "
        f"again {again} after the kill; restarted node rejoined in {rejoin_s:.2f} s"
    )


async def test_nodes_racing_for_writer_slots_get_distinct_ones(cassandra: CassandraServer) -> None:
    from dynaq.clock import SystemClock
    from dynaq.cluster import WriterSlots
    from dynaq.storage.cassandra import CassandraStore

    keyspace = new_keyspace()
    first = CassandraStore([cassandra.host], keyspace=keyspace)
    await first.open()  # the schema once, as `dynaq migrate` does
    stores = [CassandraStore([cassandra.host], keyspace=keyspace) for _ in range(4)]
    for store in stores:
        await store.open()
    slots = [WriterSlots(s, f"n{i}", SystemClock()) for i, s in enumerate(stores)]
    try:
        got = await asyncio.gather(*(w.acquire() for w in slots))
        assert sorted(got) == [0, 1, 2, 3]  # conditional puts: one winner per slot
    finally:
        for w in slots:
            await w.stop()
        for store in [*stores, first]:
            await store.close()


@pytest.mark.slow
def test_bench_cluster_reports_its_figures(cassandra: CassandraServer) -> None:
    from bench import cluster as bench_cluster

    result = bench_cluster.main(
        ["--cassandra", cassandra.host, "--nodes", "2", "--messages", "2000", "--preset", "local"]
    )
    assert result["nodes"] == 2
    for figure in ("enqueue_msgs_per_s", "receive_delete_msgs_per_s"):
        assert result[figure] > 0
    assert 0 < result["failure_detection_s"] < 10 and 0 < result["rejoin_s"] < 10
    # CPU per message of every process over each timed phase, and what it projects;
    # the session's Cassandra runs here, so its JVM is found by its port.
    for phase in ("enqueue", "receive_delete"):
        us = result[f"{phase}_cpu_us_per_msg"]
        assert {"dynaq-1", "dynaq-2", "haproxy", "cassandra", "client", "others"} <= set(us)
        assert us["nodes"] > 0 and us["cassandra"] > 0
        assert result[f"{phase}_cpu_us_per_msg_whole"]["nodes"] > 0  # with the drain's tail
        assert 0 < result[f"{phase}_cores"]["nodes"] <= 2.5
        assert "cpu0" in result[f"{phase}_cores"]  # how busy each CPU was
        assert result[f"{phase}_node_bound_msgs_per_s"] > 0
        assert result[f"{phase}_cassandra_msgs_per_s_per_core"] > 0
        projected = result["projection"][phase]
        assert projected["projected_scaling"] == 1.0  # one ring size: compared with itself
        assert projected["ring_overhead_us_per_msg"] == 0
    assert result["receive_delete_msgs_per_receive"] > 0
    assert result["cut_short"] is False
