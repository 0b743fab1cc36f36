"""Batch tracking across a real 3-node ring on Cassandra: fan out 1,000 messages with
batch item ids through a topic, consume and delete them on every node, and exactly
one completion event arrives."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dynaq.testing.cluster import LocalCluster, http_get
from dynaq.testing.servers.cassandra import CassandraServer
from tests.fixtures.cassandra import new_keyspace

SYNC_S = 1.0
EXACT = "/api/v1/batch/exact"


@pytest.fixture
def ring(tmp_path: Path, cassandra: CassandraServer) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        tmp_path,
        3,
        backend="cassandra",
        cassandra_hosts=[cassandra.host],
        keyspace=new_keyspace(),
        sync_interval_s=SYNC_S,
        env={"DYNAQ_BATCHES_COMPLETION_TOPIC": "batch-done", "DYNAQ_QUEUES_IDLE_RESCAN_S": "0.2"},
    )
    with cluster:
        yield cluster


async def _call(s: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> Any:
    async with s.request(method, url, **kw) as r:
        body = await r.json(content_type=None)
        assert r.status < 300, (method, url, r.status, body)
        return body


async def _visible_everywhere(cluster: LocalCluster, path: str) -> None:
    deadline = time.monotonic() + SYNC_S * 10
    while time.monotonic() < deadline:  # config reaches every node within the sync interval
        if await asyncio.to_thread(
            lambda: all(http_get(f"{u}{path}")[0] == 200 for u in cluster.urls)
        ):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{path} did not reach every node")


@pytest.mark.slow
async def test_fanout_with_item_ids_completes_once_across_nodes(ring: LocalCluster) -> None:
    urls = ring.urls
    async with aiohttp.ClientSession() as s:
        for q in ("work", "done-events"):
            await _call(s, "PUT", f"{urls[0]}/v1/queues/{q}")
        await _call(s, "PUT", f"{urls[0]}/v1/topics/jobs")
        await _call(s, "PUT", f"{urls[0]}/v1/topics/jobs/queues/work")
        await _call(s, "PUT", f"{urls[0]}/v1/topics/batch-done")
        await _call(s, "PUT", f"{urls[0]}/v1/topics/batch-done/queues/done-events")
        for path in ("/v1/queues/work", "/v1/queues/done-events", "/v1/topics/batch-done"):
            await _visible_everywhere(ring, path)
        # The producer opens a batch on one node, publishes through another.
        b = (await _call(s, "POST", f"{urls[0]}{EXACT}", json={"userKey": "fan"}))["batchId"]
        blocks = await _call(
            s, "POST", f"{urls[1]}{EXACT}/items", json={"batchId": b, "items": 1000}
        )
        ids = [f"{b}:{g['id']}:{i}" for g in blocks["batchItemGroupIds"] for i in range(g["upto"])]
        for start in range(0, 1000, 100):
            msgs = [
                {"body": f"job {i}", "attributes": {"dynaq.batch_item": ids[i]}}
                for i in range(start, start + 100)
            ]
            await _call(s, "POST", f"{urls[1]}/v2/topics/jobs/messages", json={"messages": msgs})
        closed = await _call(s, "POST", f"{urls[2]}{EXACT}/close/{b}")
        assert closed == {"isComplete": False}

        # Consumers receive on every node (a node serves its slice; ids append
        # within a lane, so one burst may live in one slice) and delete through
        # every node in turn: an ack made anywhere counts.
        deleted: dict[str, int] = {}
        turn = iter(range(10**6))

        async def consume(url: str) -> None:
            idle_since = time.monotonic()
            while time.monotonic() - idle_since < 5 and sum(deleted.values()) < 1000:
                got = await _call(
                    s, "POST", f"{url}/v2/queues/work/messages/receive", json={"max_messages": 50}
                )
                batch = got["messages"]
                if not batch:
                    await asyncio.sleep(0.05)
                    continue
                idle_since = time.monotonic()
                via = urls[next(turn) % len(urls)]
                r = await _call(
                    s,
                    "POST",
                    f"{via}/v2/queues/work/messages/delete",
                    json={"ids": [m["id"] for m in batch]},
                )
                deleted[via] = deleted.get(via, 0) + r["deleted"]

        await asyncio.wait_for(asyncio.gather(*(consume(u) for u in urls)), 60)
        assert sum(deleted.values()) == 1000
        assert len([u for u in deleted if deleted[u]]) == 3, deleted
        header = await _call(s, "GET", f"{urls[0]}{EXACT}/{b}")
        assert header["isComplete"] and header["pending"] == 0

        events: list[dict[str, Any]] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not events:
            for u in urls:
                got = await _call(
                    s,
                    "POST",
                    f"{u}/v2/queues/done-events/messages/receive",
                    json={"max_messages": 10},
                )
                events += [json.loads(m["body"]) for m in got["messages"]]
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # a second event, if any, would be there by now
        for u in urls:
            got = await _call(
                s, "POST", f"{u}/v2/queues/done-events/messages/receive", json={"max_messages": 10}
            )
            events += [json.loads(m["body"]) for m in got["messages"]]
        assert [(e["batchId"], e["userKey"]) for e in events] == [(b, "fan")]
        print(f"\ndeleted per node: {deleted}")
