"""Estimated-mode decrements under concurrency, through the HTTP API of one in-process
node on its real (LMDB, fsync'd) store: the decrements of one batch share header
writes, count exactly, report one completion and publish one event (issue 18)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp

from dynaq.clock import ManualClock
from dynaq.core import keys
from dynaq.node import Node
from dynaq.node.builders import build_store
from tests.fixtures.nodes import node_config
from tests.services.batch_faults import FaultyStore

EST = "/api/v1/batch/estimated"


async def _json(resp: aiohttp.ClientResponse, status: int = 200) -> Any:
    body = await resp.json()
    assert resp.status == status, body
    return body


async def test_concurrent_decrements_share_writes_and_complete_once(
    tmp_path: Path, clock: ManualClock
) -> None:
    config = node_config(tmp_path, batches={"completion_topic": "done"})
    lmdb = build_store(config)
    await lmdb.open()
    store = FaultyStore(lmdb)  # counts the batch header's writes; injects nothing
    n = Node(config, clock=clock, store=store)
    await n.start()
    try:
        conn = aiohttp.TCPConnector(limit=32)
        async with aiohttp.ClientSession(
            base_url=f"http://127.0.0.1:{n.port}", connector=conn
        ) as http:
            await http.put("/v1/topics/done")
            assert (await http.put("/v1/queues/events")).status == 201
            await http.put("/v1/topics/done/queues/events")
            clients, each, by = 32, 20, 3
            b = (await _json(await http.post(EST, json={"userKey": "hot"})))["batchId"]
            await _json(await http.post(f"{EST}/{b}/incr?by={clients * each * by}"))
            assert (await _json(await http.post(f"{EST}/{b}/close")))["isComplete"] is False
            store.prefix = keys.batch_header(b)

            async def client() -> list[dict[str, Any]]:
                seen: list[dict[str, Any]] = []
                for _ in range(each):
                    body = {"acks": [{"batchId": b, "by": by}]}
                    r = await http.post(f"{EST}/decr", json=body)
                    seen += (await _json(r))["batchCompletions"]
                return seen

            runs = await asyncio.gather(*(client() for _ in range(clients)))
            seen = [c for got in runs for c in got]
            assert [(c["batchId"], c["userKey"]) for c in seen] == [(b, "hot")]
            got = await _json(await http.get(f"{EST}/{b}"))
            assert got["pending"] == 0 and got["isComplete"]
            assert store.flips[b] == 1
            # 640 decrements; the header writes are the coalesced updates and the announcement.
            writes = store.calls["put_if_version"]
            assert writes <= clients * each // 4, writes
            r = await http.post("/v2/queues/events/messages/receive", json={"max_messages": 10})
            events = (await _json(r))["messages"]
            assert [json.loads(m["body"])["batchId"] for m in events] == [b]
    finally:
        await n.stop()
        await lmdb.close()
