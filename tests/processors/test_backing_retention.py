"""A processor's backing stream is declared with a retention limit: its old segment
files go while the processor runs, and recovery still finds its last records (the
newest finalized file always stays), so a restarted runner delivers exactly once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import pytest

from dynaq.client import AsyncClient
from dynaq.processors import Graph, GraphRunner
from dynaq.testing.process import NodeProcess, node_process


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """A node whose stream files hold 8 entries each, so retention acts within a test."""
    p = node_process(
        tmp_path_factory.mktemp("retention-node"),
        env={"DYNAQ_STREAMS_SEGMENT_MAX_ENTRIES": "8"},
    )
    p.start()
    try:
        yield p
    finally:
        p.kill()


@pytest.fixture
async def client(node: NodeProcess) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(node.url) as c:
        yield c


def _double(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {"n": entry["n"], "double": 2 * entry["n"]}


def _finalized(node: NodeProcess, stream: str) -> list[str]:
    files = (node.data_dir / "streams" / stream).glob("*.seg")
    return sorted(f.name for f in files if not f.name.startswith("active"))


async def _run_until(client: AsyncClient, g: Graph, outputs: int) -> None:
    runner = GraphRunner(g, client, lease_ttl_s=2, backing_max_bytes=1)
    await runner.start()
    try:
        for _ in range(600):
            if await client.stream_size("ret-out") >= outputs:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"fewer than {outputs} outputs after 30 s")
    finally:
        await runner.stop()


async def test_old_backing_records_go_and_a_restarted_runner_still_delivers_once(
    client: AsyncClient, node: NodeProcess
) -> None:
    g = Graph("ret")
    g.transform("p", _double, "ret-in", "ret-out")
    await client.declare_stream("ret-in", {"type": "object"})
    await client.append("ret-in", [{"n": n} for n in range(40)])
    await _run_until(client, g, 40)
    finals = await asyncio.to_thread(_finalized, node, "_cues.ret.p")
    assert len(finals) == 1, finals  # every older file was dropped; the newest stays
    assert not finals[0].startswith("0" * 20)  # and it is not the first one
    # A new runner recovers from what is kept and goes on: nothing twice, nothing lost.
    await client.append("ret-in", [{"n": n} for n in range(40, 60)])
    await _run_until(client, g, 60)
    got = [e["entry"]["n"] for e in await client.read_stream("ret-out", 0, 1000)]
    assert got == list(range(60))
