"""A visibility timeout of 0 (SQS allows it) makes a served message visible at once:
every receive may serve it again, but one receive serves it once and counts it once."""

from __future__ import annotations

from pathlib import Path

from dynaq.clock import ManualClock
from dynaq.core.messages import NewMessage
from dynaq.node import Node
from dynaq.storage.memory import MemoryStore
from tests.fixtures.nodes import node_config


async def test_each_receive_serves_a_message_once_with_a_zero_timeout(tmp_path: Path) -> None:
    node = Node(node_config(tmp_path), clock=ManualClock(), store=MemoryStore())
    await node.start()
    try:
        await node.catalog.create_queue("q", {"visibility_timeout_s": 0.0})
        ids = await node.queues.enqueue("q", [NewMessage(b"one"), NewMessage(b"two")])
        for n in range(1, 5):
            # From the second receive on, both are expired deliveries (served from the
            # deadline heap) and also visible to the partition scan that follows.
            got = await node.queues.receive("q", 10)
            assert sorted(m.id for m in got) == sorted(ids), f"receive {n}"
            assert [m.receive_count for m in got] == [n, n], f"receive {n}"
    finally:
        await node.stop()


async def test_a_zero_timeout_per_receive_counts_each_delivery_once(tmp_path: Path) -> None:
    node = Node(node_config(tmp_path), clock=ManualClock(), store=MemoryStore())
    await node.start()
    try:
        await node.catalog.create_queue("q")  # 30 s by default; 0 asked per receive
        (mid,) = await node.queues.enqueue("q", [NewMessage(b"x")])
        counts = []
        for _ in range(3):
            (m,) = await node.queues.receive("q", 10, visibility_timeout_s=0)
            assert m.id == mid
            counts.append(m.receive_count)
        assert counts == [1, 2, 3]
        # A receive with a timeout again holds it: the next one finds nothing.
        (m,) = await node.queues.receive("q", 10, visibility_timeout_s=30)
        assert m.receive_count == 4
        assert await node.queues.receive("q", 10) == []
    finally:
        await node.stop()


async def test_a_group_message_is_served_once_per_receive_with_a_zero_timeout(
    tmp_path: Path,
) -> None:
    node = Node(node_config(tmp_path), clock=ManualClock(), store=MemoryStore())
    await node.start()
    try:
        await node.catalog.create_queue("q", {"visibility_timeout_s": 0.0})
        first, second = await node.queues.enqueue(
            "q", [NewMessage(b"a", group="g"), NewMessage(b"b", group="g")]
        )
        for n in range(1, 4):
            # One in flight per group: only the first, whose delivery never holds it.
            got = await node.queues.receive("q", 10)
            assert [(m.id, m.receive_count) for m in got] == [(first, n)]
        await node.queues.delete("q", [first])
        (m,) = await node.queues.receive("q", 10)
        assert m.id == second
    finally:
        await node.stop()
