"""Many PUT /v1/queues/<name> at once on one node: every queue is created."""

from __future__ import annotations

import asyncio

import aiohttp

from dynaq.node import Node


async def test_parallel_creations_of_distinct_queues_all_succeed(
    http: aiohttp.ClientSession, node: Node
) -> None:
    async def put(path: str) -> tuple[int, str]:
        async with http.put(path) as r:
            return r.status, await r.text()

    answers = await asyncio.gather(*(put(f"/v1/queues/cc-{i}") for i in range(200)))
    assert [a for a in answers if a[0] != 201] == []
    async with http.get("/v1/queues") as r:
        assert sorted((await r.json())["queues"]) == sorted(f"cc-{i}" for i in range(200))
    numbers = {q.number for q in node.catalog.cached_queues()}
    assert len(numbers) == 200
    topics = await asyncio.gather(*(put(f"/v1/topics/ct-{i}") for i in range(50)))
    assert [a for a in topics if a[0] != 201] == []
    again = await asyncio.gather(*(put("/v1/queues/cc-0") for _ in range(5)))
    assert {a[0] for a in again} == {422}
