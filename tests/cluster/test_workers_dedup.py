"""Dedup ids on a node of several workers: a race through two workers stores once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from dynaq.testing import run_node
from tests.cluster.workers import wait_workers, worker_urls

ROUNDS = 20
SENDERS = 8


async def _send(url: str, body: dict[str, Any]) -> str:
    async with (
        aiohttp.ClientSession() as http,  # a connection of its own
        http.post(f"{url}/v2/queues/dd/messages", json=body) as r,
    ):
        assert r.status == 200, await r.text()
        return str((await r.json())["ids"][0])


async def test_the_same_dedup_id_through_both_workers_at_once_is_stored_once(
    tmp_path: Path,
) -> None:
    """Each worker serialises its own dedup checks; without a lock the two share,
    two copies sent at the same moment through two workers both found nothing and
    both were stored (9 rounds in 30 under SQS FIFO senders)."""
    async with run_node(directory=tmp_path, http_workers=2) as node:
        await wait_workers(node, 2)
        urls = list((await worker_urls(node)).values())
        async with aiohttp.ClientSession() as http, http.put(f"{node.url}/v1/queues/dd") as r:
            assert r.status == 201
        for n in range(ROUNDS):
            body = {"messages": [{"body": f"m{n}", "dedup_id": f"d{n}"}]}
            ids = await asyncio.gather(*(_send(urls[i % len(urls)], body) for i in range(SENDERS)))
            assert len(set(ids)) == 1, (n, ids)
        bodies: list[str] = []
        async with aiohttp.ClientSession() as http:
            for _ in range(50):  # bounded: a receive of 100 takes them all in a few
                got = await http.post(
                    f"{node.url}/v2/queues/dd/messages/receive",
                    json={"max_messages": 100, "visibility_timeout_s": 600, "wait_time_s": 1},
                )
                bodies += [m["body"] for m in (await got.json())["messages"]]
                if len(bodies) >= ROUNDS:
                    break
            await asyncio.sleep(0.5)  # nothing more comes
            got = await http.post(
                f"{node.url}/v2/queues/dd/messages/receive", json={"max_messages": 100}
            )
            bodies += [m["body"] for m in (await got.json())["messages"]]
        assert sorted(bodies) == sorted(f"m{n}" for n in range(ROUNDS))
