"""Failover between endpoints when one node is killed, with real node processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dynaq.client import AsyncClient, Client, RetryPolicy
from dynaq.errors import Unreachable
from dynaq.testing.process import node_process


@pytest.mark.slow
async def test_requests_move_to_the_next_endpoint_when_one_is_killed(tmp_path: Path) -> None:
    a = node_process(tmp_path, "dynaq-a")
    b = node_process(tmp_path, "dynaq-b")
    await asyncio.gather(asyncio.to_thread(a.start), asyncio.to_thread(b.start))
    try:
        async with AsyncClient([a.url, b.url]) as c:
            await c.create_queue("jobs")
            assert c.addr == f"127.0.0.1:{a.port}"
            (first,) = await c.enqueue("jobs", [b"before"])
            await asyncio.to_thread(a.kill)  # kill -9: connections are refused from now on

            # An enqueue that never left (connection refused) is safe to resend: it
            # goes to the next endpoint, once.
            async with AsyncClient([b.url]) as direct:
                await direct.create_queue("jobs")
            (second,) = await c.enqueue("jobs", [b"after"])
            assert c.addr == f"127.0.0.1:{b.port}"
            got = await c.receive("jobs", 10, wait_time_s=1)
            assert [(m.id, m.body, m.addr) for m in got] == [(second, b"after", c.addr)]
            assert first != second

        def blocking() -> str:
            with Client(f"{a.url},{b.url}") as sync:
                assert sync.list_queues() == ["jobs"]  # a is dead: answered by b
                return sync.addr

        assert await asyncio.to_thread(blocking) == f"127.0.0.1:{b.port}"
    finally:
        await asyncio.to_thread(a.kill)
        await asyncio.to_thread(b.kill)


async def test_no_endpoint_left_is_unreachable_after_the_policy(tmp_path: Path) -> None:
    a = node_process(tmp_path, "dynaq-gone")  # never started: its port refuses
    policy = RetryPolicy(attempts=3, base_delay_s=0.01)
    async with AsyncClient(a.url, retry=policy) as c:
        with pytest.raises(Unreachable) as err:
            await c.enqueue("jobs", [b"x"])
    assert err.value.sent is False and err.value.retriable
