"""Shared fixtures: in-process nodes with a manual clock, and real node processes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dynaq.clock import ManualClock
from dynaq.config import config_from_mapping
from dynaq.node import Node
from dynaq.testing.process import NodeProcess, node_process

pytest_plugins = ["tests.fixtures_cassandra", "tests.fixtures_postgres", "tests.spark_fixtures"]


def node_config(tmp_path: Path, **sections: dict[str, Any]) -> Any:
    raw: dict[str, dict[str, Any]] = {
        "node": {"name": "test-node"},
        "data": {"dir": str(tmp_path / "data")},
        "http": {"port": 0, "host": "127.0.0.1"},
        "stats": {"type": "none"},
        "storage": {"backend": "embedded"},
        "embedded": {"map_size_mb": 1024},
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return config_from_mapping(raw)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def node(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Node]:
    """An in-process node on LMDB, on a free port, with a manual clock."""
    n = Node(node_config(tmp_path), clock=clock)
    await n.start()
    try:
        yield n
    finally:
        await n.stop()


@pytest.fixture
async def http(node: Node) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{node.port}") as s:
        yield s


@pytest.fixture
def node_proc(tmp_path: Path) -> Iterator[NodeProcess]:
    """A real ``dynaq server`` process (not started: call ``.start()``)."""
    p = node_process(tmp_path)
    try:
        yield p
    finally:
        p.kill()
