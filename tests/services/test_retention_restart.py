"""Retention on a node restarted more often than its sweep interval."""

from __future__ import annotations

import asyncio
from pathlib import Path

from dynaq.clock import ManualClock
from dynaq.core.messages import NewMessage
from dynaq.node import Node
from dynaq.storage.memory import MemoryStore
from tests.fixtures.nodes import node_config


async def test_a_node_sweeps_soon_after_it_starts_not_an_interval_later(tmp_path: Path) -> None:
    """The first sweep used to come one interval (60 s) after start, so a node
    restarted every minute never removed an expired message."""
    store, clock = MemoryStore(), ManualClock()
    a = Node(node_config(tmp_path / "a"), clock=clock, store=store)
    await a.start()
    try:
        await a.catalog.create_queue("r", {"retention_s": 60.0})
        info = await a.catalog.queue("r")
        await a.queues.enqueue(info, [NewMessage(f"old{i}".encode()) for i in range(10)])
    finally:
        await a.stop()
    clock.advance(61)
    b = Node(node_config(tmp_path / "b"), clock=clock, store=store)
    await b.start()
    try:
        for _ in range(70):  # 7 s of the node's clock, in steps its upkeep can follow
            clock.advance(0.1)
            await asyncio.sleep(0.005)
        assert await b.queues.receive("r", 100) == []
    finally:
        await b.stop()
