"""A full store refuses every write that adds messages, delayed ones included, and
still lets moves happen: due delayed messages become visible and dead letters
reach their queue, since each move frees what it writes."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from dynaq.core.messages import NewMessage
from dynaq.errors import InsufficientStorage
from dynaq.node import Node
from dynaq.services.queue_records import RedrivePolicy
from tests.fixtures.nodes import node_config


async def _drain(node: Node, queue: str, want: int, timeout_s: float = 20.0) -> list[bytes]:
    """Receive and delete until ``want`` bodies arrived (bounded in time)."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        batch = await node.queues.receive(queue, 100, 30.0)
        if not batch:
            await asyncio.sleep(0.1)
            continue
        got.extend(m.body for m in batch)
        await node.queues.delete(queue, [m.id for m in batch])
    return got


async def test_moves_go_on_in_a_full_store_and_delayed_sends_are_refused(tmp_path: Path) -> None:
    node = Node(node_config(tmp_path, embedded={"map_size_mb": 2, "min_free_disk_mb": 0}))
    await node.start()
    try:
        await node.catalog.create_queue("later")
        await node.catalog.create_queue("dlq")
        await node.catalog.create_queue(
            "src", {"visibility_timeout_s": 1.0, "redrive_policy": RedrivePolicy("dlq", 1)}
        )
        await node.catalog.create_queue("fill")
        later = await node.catalog.queue("later")
        await node.queues.enqueue(
            later, [NewMessage(f"later-{i}".encode(), delay_s=2) for i in range(40)]
        )
        src = await node.catalog.queue("src")
        await node.queues.enqueue(src, [NewMessage(f"dead-{i}".encode()) for i in range(40)])
        assert len(await node.queues.receive("src", 100)) == 40  # in flight for 1 s
        fill = await node.catalog.queue("fill")
        for size in (20, 1):  # batches, then single messages: no room left for one
            with pytest.raises(InsufficientStorage):
                for _ in range(10_000):  # bounded: a 2 MiB map fills in a few hundred
                    await node.queues.enqueue(
                        fill, [NewMessage(os.urandom(300)) for _ in range(size)]
                    )
        # A delayed send adds a message as any other does: refused, not let past the limit.
        with pytest.raises(InsufficientStorage):
            await node.queues.enqueue(later, [NewMessage(b"x" * 300, delay_s=1)])
        # Due delayed messages still become visible, and dead letters still move.
        assert sorted(await _drain(node, "later", 40)) == sorted(
            f"later-{i}".encode() for i in range(40)
        )
        await asyncio.sleep(1.2)  # src's visibility ends: the next receive dead-letters
        assert await node.queues.receive("src", 100) == []
        assert sorted(await _drain(node, "dlq", 40)) == sorted(
            f"dead-{i}".encode() for i in range(40)
        )
    finally:
        await node.stop()
