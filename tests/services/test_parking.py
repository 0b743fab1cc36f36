"""A lone node keeps its in-flight messages across a graceful restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

from dynaq.core.messages import NewMessage
from dynaq.node import Node
from dynaq.services.queue_records import RedrivePolicy
from tests.fixtures.nodes import node_config


async def _node(tmp_path: Path) -> Node:
    node = Node(node_config(tmp_path))
    await node.start()
    return node


async def test_a_graceful_restart_keeps_deadlines_counts_and_receipts(tmp_path: Path) -> None:
    """Before, every deploy served each in-flight message again at once, its count
    started over (a poison message got more deliveries than max_receive_count), and
    receipts handed out before the restart no longer deleted anything."""
    a = await _node(tmp_path)
    try:
        await a.catalog.create_queue("dl")
        policy = RedrivePolicy("dl", 2)
        await a.catalog.create_queue("p", {"redrive_policy": policy})
        info = await a.catalog.queue("p")
        await a.queues.enqueue(info, [NewMessage(b"poison"), NewMessage(b"slow")])
        got = {m.body: m for m in await a.queues.receive("p", 10, 600.0)}
        assert set(got) == {b"poison", b"slow"}
        # the poison message: its consumer fails fast (a short visibility)
        await a.queues.change_visibility("p", [got[b"poison"].id], 1.0)
    finally:
        await a.stop()
    b = await _node(tmp_path)
    try:
        info = await b.catalog.queue("p")
        assert await b.queues.receive("p", 10) == []  # both still in flight
        # the receipt handed out before the restart still acts on its delivery
        slow = got[b"slow"]
        done, stale = await b.queues.receipts.delete(info, [(slow.id, slow.delivery)])
        assert (done, stale) == ([slow.id], [])
        await asyncio.sleep(1.1)
        (again,) = await b.queues.receive("p", 10, 1.0)
        assert again.body == b"poison" and again.receive_count == 2  # counts go on
        await asyncio.sleep(1.1)
        assert await b.queues.receive("p", 10) == []  # a third serve: dead-lettered
        (dead,) = await b.queues.receive("dl", 10)
        assert dead.body == b"poison"
    finally:
        await b.stop()
