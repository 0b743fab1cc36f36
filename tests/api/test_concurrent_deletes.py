"""Concurrent deletes of one message through one node: exactly one of them deletes it.

Each answers as if it ran alone, in some order: one ``true`` (v1) and the rest
``false``, and the node's depth drops once per message (as the rest of the
after-delete work, batch-item acks included, runs once). On LMDB the store's writer already knows whether a key existed when it
commits; Cassandra has no conditional delete (short of LWT), so the node serialises
deletes of one id itself (:class:`dynaq.services.queues.deletes.Deleter`). Across
nodes the race remains: see ``docs/storage-cassandra.md``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dynaq.clock import ManualClock
from dynaq.core.messages import NewMessage
from dynaq.node import Node
from dynaq.services.catalog import QueueInfo
from dynaq.testing.servers.cassandra import CassandraServer
from tests.fixtures.cassandra import new_keyspace
from tests.fixtures.nodes import node_config


@pytest.fixture(params=["lmdb", "cassandra"])
def server(request: pytest.FixtureRequest) -> CassandraServer | None:
    """None for LMDB, else the session's Cassandra (started outside the event loop)."""
    if request.param == "lmdb":
        return None
    cassandra: CassandraServer = request.getfixturevalue("cassandra")
    return cassandra


@pytest.fixture
async def node_on(server: CassandraServer | None, tmp_path: Path) -> AsyncIterator[Node]:
    """An in-process node on LMDB, or on a fresh keyspace of the session's Cassandra."""
    store: Any = None
    if server is not None:
        from dynaq.storage.cassandra import CassandraStore

        store = CassandraStore([server.host], keyspace=new_keyspace())
    n = Node(node_config(tmp_path), clock=ManualClock(), store=store)
    await n.start()
    try:
        yield n
    finally:
        await n.stop()


async def _json(r: aiohttp.ClientResponse) -> Any:
    text = await r.text()
    assert r.status in (200, 201), text
    return json.loads(text)


async def _depth(http: aiohttp.ClientSession, queue: str) -> int:
    return int((await _json(await http.get(f"/v2/queues/{queue}")))["depth"])


async def test_concurrent_deletes_of_one_id_answer_true_once_and_count_once(
    node_on: Node,
) -> None:
    async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{node_on.port}") as http:
        await _json(await http.put("/v1/queues/jobs"))
        ids = [
            await (await http.put("/v1/queues/jobs/message", data=b"x")).text() for _ in range(20)
        ]
        assert await _depth(http, "jobs") == 20

        async def delete(mid: str) -> bool:
            return bool(await _json(await http.delete(f"/v1/queues/jobs/message/{mid}")))

        for mid in ids[:10]:
            answers = await asyncio.gather(*(delete(mid) for _ in range(3)))
            assert sorted(answers) == [False, False, True], (mid, answers)
        # v2's batch delete too: overlapping id lists, each id deleted by exactly one call.
        batches = [ids[10:16], ids[13:20], ids[10:20]]

        async def delete_many(some: list[str]) -> Any:
            return await _json(
                await http.post("/v2/queues/jobs/messages/delete", json={"ids": some})
            )

        got = await asyncio.gather(*(delete_many(b) for b in batches))
        deleted = [i for answer in got for i in answer["ids"]]
        assert sorted(deleted) == sorted(ids[10:20]), got
        assert await _depth(http, "jobs") == 0
        assert await _json(await http.get("/v1/queues/jobs/messages/100")) == []


# waiting for another delete of the same id ---------------------------------------------


async def _one_message(node: Node) -> tuple[QueueInfo, int]:
    info = await node.catalog.create_queue("jobs")
    (mid,) = await node.queues.enqueue(info, [NewMessage(b"x")])
    return info, mid


async def test_a_waiting_delete_given_up_leaves_the_others_waiting(node_on: Node) -> None:
    """Three deletes of one id: the first deletes it, the second waits and is cancelled
    (a client gone), the third still learns the first's outcome and answers absent."""
    info, mid = await _one_message(node_on)
    first = asyncio.create_task(node_on.queues.delete(info, [mid]))
    await asyncio.sleep(0)  # first holds the id and awaits the store
    second = asyncio.create_task(node_on.queues.delete(info, [mid]))
    third = asyncio.create_task(node_on.queues.delete(info, [mid]))
    await asyncio.sleep(0)  # both wait for first
    second.cancel()
    assert await asyncio.wait_for(first, 10) == [mid]
    assert await asyncio.wait_for(third, 10) == []
    assert second.cancelled()
    assert await node_on.queues.depth(info) == 0


async def test_a_delete_waiting_for_a_cancelled_one_deletes_the_message_itself(
    node_on: Node,
) -> None:
    """The delete that held the id is cancelled mid-way: the waiting one does not trust
    it and deletes the message itself (or finds it already gone), without hanging."""
    info, mid = await _one_message(node_on)
    first = asyncio.create_task(node_on.queues.delete(info, [mid]))
    await asyncio.sleep(0)
    second = asyncio.create_task(node_on.queues.delete(info, [mid]))
    await asyncio.sleep(0)
    first.cancel()
    got = await asyncio.wait_for(second, 10)
    assert got in ([mid], []), got  # [] only if the cancelled write went through anyway
    assert first.cancelled()
    assert await node_on.queues.peek(info, [mid]) == []
