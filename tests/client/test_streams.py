"""The client's stream surface, both flavours, against a real node process with a token:
the catalog, fenced appends under the publisher lease, ranges, and following live."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dynaq.client import AsyncClient, Client, StreamEntry
from dynaq.errors import (
    InvalidInput,
    OrderKeyDecreased,
    PublisherFenced,
    SchemaConflict,
    StreamNotFound,
)
from dynaq.testing.process import NodeProcess, node_process

ADMIN = "adm-streams-0123456789"
TOKENS = f"ops:{ADMIN}:admin=*"
TRADES: dict[str, Any] = {
    "type": "object",
    "properties": {"ts": {"type": "integer"}, "price": {"type": "number"}},
    "required": ["ts", "price"],
}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    p = node_process(tmp_path_factory.mktemp("client-streams"), env={"DYNAQ_AUTH_TOKENS": TOKENS})
    p.start()
    try:
        yield p
    finally:
        p.kill()


def trades(first_ts: int, n: int) -> list[dict[str, Any]]:
    return [{"ts": first_ts + i, "price": 10.0 + i} for i in range(n)]


async def test_catalog_lease_and_ranges(node: NodeProcess) -> None:
    async with AsyncClient(node.url, token=ADMIN) as c:
        made = await c.declare_stream("trades", TRADES, order_key="ts")
        assert (made.name, made.order_key, made.created, made.extended) == (
            "trades",
            "ts",
            True,
            False,
        )
        again = await c.declare_stream("trades", TRADES, order_key="ts")
        assert (again.created, again.extended, again.signature) == (False, False, made.signature)
        with pytest.raises(SchemaConflict):
            await c.declare_stream("trades", TRADES, order_key=None)  # the order key changed

        first = await c.append("trades", trades(0, 3))  # no lease held: unfenced
        assert (first.first_index, first.count) == (0, 3)
        with pytest.raises(OrderKeyDecreased):
            await c.append("trades", trades(1, 1))
        with pytest.raises(InvalidInput):
            await c.append("trades", [{"ts": 9}])  # no price: the schema refuses it

        lease = await c.acquire_publisher("trades", ttl_s=30)
        assert lease.stream == "trades" and lease.token > 0 and lease.ttl_s == 30
        with pytest.raises(PublisherFenced):
            await c.append("trades", trades(3, 1))  # no token while the lease is held
        with pytest.raises(PublisherFenced):
            await c.acquire_publisher("trades")  # held by another token
        assert (await c.append("trades", trades(3, 2), token=lease.token)).first_index == 3
        renewed = await c.renew_publisher("trades", lease.token, ttl_s=60)
        assert (renewed.token, renewed.ttl_s) == (lease.token, 60)
        await c.release_publisher("trades", lease.token)
        with pytest.raises(PublisherFenced):
            await c.append("trades", trades(5, 1), token=lease.token)  # released: fenced
        newer = await c.acquire_publisher("trades", ttl_s=5)
        assert newer.token > lease.token  # tokens only grow
        await c.release_publisher("trades", newer.token)

        info = await c.describe_stream("trades")
        assert (info.name, info.size, info.order_key, info.schema) == ("trades", 5, "ts", TRADES)
        (listed,) = [s for s in await c.list_streams() if s.name == "trades"]
        assert listed.size == 5 and listed.schema is None and listed.signature == info.signature
        assert await c.stream_size("trades") == 5

        got = await c.read_range("trades", 1, count=2)
        assert got == [
            StreamEntry(1, 1, {"ts": 1, "price": 11.0}),
            StreamEntry(2, 2, {"ts": 2, "price": 12.0}),
        ]
        assert [e.index for e in await c.read_range("trades", tail=2)] == [3, 4]
        assert [e.index for e in await c.read_range("trades", since=3, until=3)] == [3]
        assert await c.read_range("trades", 5) == []
        with pytest.raises(ValueError, match="at most one"):
            await c.read_range("trades", 0, tail=1)

        await c.delete_stream("trades")
        with pytest.raises(StreamNotFound):
            await c.describe_stream("trades")
        with pytest.raises(StreamNotFound):
            await c.append("trades", trades(0, 1))


async def test_follow_live_async(node: NodeProcess) -> None:
    async with AsyncClient(node.url, token=ADMIN) as c:
        await c.declare_stream("ticks", TRADES, "ts")
        await c.append("ticks", trades(0, 2))
        seen: list[StreamEntry] = []

        async def follow() -> None:
            async for entry in c.follow("ticks", start=1, count=4):
                seen.append(entry)

        follower = asyncio.create_task(follow())
        try:
            for ts in range(2, 5):
                await asyncio.sleep(0.05)
                await c.append("ticks", trades(ts, 1))  # each arrives while it follows
            await asyncio.wait_for(follower, 10)
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
        assert [e.index for e in seen] == [1, 2, 3, 4] and seen[-1].entry["ts"] == 4

        # tail + idle timeout: the last entry, then nothing new for 0.3 s ends it.
        idle = [e.index async for e in c.follow("ticks", tail=1, idle_timeout_s=0.3)]
        assert idle == [4]
        # Closing the iterator early closes the listener: the stream can be deleted at once.
        it = c.follow("ticks")
        assert (await anext(it)).index == 0
        await it.aclose()
        await c.delete_stream("ticks")
        with pytest.raises(StreamNotFound):
            async for _ in c.follow("ticks"):
                pass


def test_the_blocking_client_follows_too(node: NodeProcess) -> None:
    with Client(node.url, token=ADMIN) as c:
        assert c.declare_stream("events", TRADES, "ts").created
        lease = c.acquire_publisher("events")
        c.append("events", trades(0, 2), token=lease.token)

        def later() -> None:
            with Client(node.url, token=ADMIN) as other:
                other.append("events", trades(2, 2), token=lease.token)

        writer = threading.Timer(0.2, later)
        writer.start()
        try:
            seen = [e.index for e in c.follow("events", count=4, idle_timeout_s=10)]
        finally:
            writer.join()
        assert seen == [0, 1, 2, 3]
        assert [e.index for e in c.follow("events", start=3, idle_timeout_s=0.3)] == [3]
        assert [e.entry["ts"] for e in c.read_range("events", 2, 10)] == [2, 3]
        with pytest.raises(ValueError, match="start must be"):
            c.follow("events", start=-1)
        c.release_publisher("events", lease.token)
        assert [s.name for s in c.list_streams()] == ["events"]
        c.delete_stream("events")
        with pytest.raises(StreamNotFound):
            list(c.follow("events"))


@pytest.fixture
def restartable(tmp_path: Path) -> Iterator[NodeProcess]:
    """A node of this test's own: the test restarts it."""
    p = node_process(tmp_path, env={"DYNAQ_AUTH_TOKENS": TOKENS})
    p.start()
    try:
        yield p
    finally:
        p.kill()


async def test_follow_goes_on_across_a_node_restart(restartable: NodeProcess) -> None:
    node = restartable
    async with AsyncClient(node.url, token=ADMIN) as c:
        await c.declare_stream("durable", TRADES, "ts")
        await c.append("durable", trades(0, 2))
        seen: list[int] = []
        it = c.follow("durable", count=5)
        seen += [(await anext(it)).index, (await anext(it)).index]
        await asyncio.to_thread(node.kill)  # kill -9: the open response breaks off
        nxt = asyncio.ensure_future(anext(it))  # retrying while the node is down
        await asyncio.sleep(0.3)
        await asyncio.to_thread(node.start)
        async with AsyncClient(node.url, token=ADMIN) as fresh:
            await fresh.append("durable", trades(2, 3))
        seen.append((await asyncio.wait_for(nxt, 30)).index)
        seen += [e.index async for e in it]  # it ends after 5 in all
        assert seen == [0, 1, 2, 3, 4]  # none lost, none repeated


def test_blocking_follow_goes_on_across_a_node_restart(restartable: NodeProcess) -> None:
    node = restartable
    with Client(node.url, token=ADMIN) as s:
        s.declare_stream("durable", TRADES, "ts")
        s.append("durable", trades(0, 5))
        follower = s.follow("durable", start=3, count=3)
        assert next(follower).index == 3
        node.kill()
        restarted = threading.Timer(0.3, node.start)
        restarted.start()
        try:
            assert next(follower).index == 4  # durable before the kill: read again after it
            restarted.join()
            with Client(node.url, token=ADMIN) as fresh_sync:
                fresh_sync.append("durable", trades(5, 1))
            assert [e.index for e in follower] == [5]
        finally:
            restarted.join()
