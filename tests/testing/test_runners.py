"""dynaq.testing's async API: nodes, rings and servers start, answer, restart and go away."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from pathlib import Path
from typing import TypeVar

import aiohttp
import pytest

from dynaq.testing import (
    ServerUnavailable,
    free_port,
    run_cassandra,
    run_cluster,
    run_node,
    run_postgres,
    run_statsd,
    settings_env,
)

T = TypeVar("T")


async def _enter(manager: AbstractAsyncContextManager[T], stack: AsyncExitStack) -> T:
    """Enter ``manager`` on ``stack``; a missing server skips (fails in CI)."""
    try:
        return await stack.enter_async_context(manager)
    except ServerUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as s:
        yield s


def test_settings_become_dynaq_env_and_typos_are_refused() -> None:
    env = settings_env(
        {"queues_visibility_timeout_s": 5, "gossip_enabled": True, "cassandra_hosts": ["a", "b"]}
    )
    assert env == {
        "DYNAQ_QUEUES_VISIBILITY_TIMEOUT_S": "5",
        "DYNAQ_GOSSIP_ENABLED": "true",
        "DYNAQ_CASSANDRA_HOSTS": "a,b",
    }
    for typo in ("queues_visibility_timeout", "queue_visibility_timeout_s", "http"):
        with pytest.raises(TypeError, match=typo):
            settings_env({typo: 1})


async def test_node_answers_on_its_port_and_comes_back_after_a_kill(tmp_path: Path) -> None:
    port = free_port()
    async with run_node(port=port, directory=tmp_path, http_max_batch=7) as node:
        assert node.port == port and node.url == f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession(node.url) as http:
            async with http.put("/v1/queues/q") as r:
                assert r.status == 201
            async with http.put("/v1/queues/q/message", data=b"kept") as r:
                assert r.status == 200
            await node.kill()
            assert not node.alive()
            await node.restart()
            async with http.get("/v1/queues/q/messages/8") as r:
                assert r.status == 422  # over http_max_batch: the setting reached the node
            async with http.get("/v1/queues/q/messages/7") as r:
                assert [m["body"] for m in await r.json()] == ["kept"]
        assert await node.stop() == 0
        await node.start()
        assert node.alive()
    assert not node.alive()
    assert await asyncio.to_thread((tmp_path / "dynaq-1-data").is_dir)  # a given dir is kept


async def test_node_that_cannot_start_reports_its_log() -> None:
    with pytest.raises(RuntimeError, match="exited at start"):
        async with run_node(env={"DYNAQ_STORAGE_BACKEND": "no-such-backend"}):
            pass


async def test_a_start_cancelled_midway_leaves_no_process(tmp_path: Path) -> None:
    port = free_port()

    async def use_a_node() -> None:
        async with run_node(port=port, directory=tmp_path):
            await asyncio.sleep(60)

    task = asyncio.create_task(use_a_node())
    await asyncio.sleep(0.05)  # the node is starting in a worker thread
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.ClientConnectionError):
            await http.get(f"http://127.0.0.1:{port}/health")


async def test_cluster_forms_loses_and_regains_a_node() -> None:
    async with run_cluster(size=2) as cluster:
        assert [n.name for n in cluster.nodes] == ["dynaq-1", "dynaq-2"]
        assert len(cluster.urls) == 2
        await cluster.kill("dynaq-2")
        await cluster.wait_converged(["dynaq-1"])
        await cluster.start("dynaq-2")
        await cluster.wait_converged(["dynaq-1", "dynaq-2"])
        assert await cluster.stop("dynaq-2") == 0
    assert not any(n.alive() for n in cluster.nodes)


async def test_statsd_receives_a_nodes_metrics(stack: AsyncExitStack) -> None:
    server = await _enter(run_statsd(), stack)
    node = await stack.enter_async_context(
        run_node(stats_type="statsd", stats_address=server.address, stats_flush_interval_s=0.2)
    )
    async with aiohttp.ClientSession(node.url) as http:
        async with http.put("/v1/queues/metered") as r:
            assert r.status == 201
        async with http.put("/v1/queues/metered/message", data=b"x") as r:
            assert r.status == 200
    counters: dict[str, float] = {}
    for _ in range(100):
        counters = await asyncio.to_thread(server.counters)
        if counters.get("dynaq.metered.sent.count") == 1:
            break
        await asyncio.sleep(0.1)
    assert counters.get("dynaq.metered.sent.count") == 1, counters


async def test_postgres_accepts_connections(stack: AsyncExitStack) -> None:
    import asyncpg

    server = await _enter(run_postgres(), stack)
    conn = await asyncpg.connect(server.dsn)
    try:
        assert await conn.fetchval("SELECT 1") == 1
    finally:
        await conn.close()
    directory = server.directory
    await stack.aclose()
    assert not await asyncio.to_thread(directory.exists)


async def test_missing_cassandra_is_server_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYNAQ_TESTING_CACHE_DIR", "/nonexistent")
    with pytest.raises(ServerUnavailable, match="Cassandra"):
        async with run_cassandra():
            pass
