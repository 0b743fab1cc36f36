"""A batch's completion event is published once, even when its delivery is repeated
by a node restarted with its clock stepped (the dedup window alone cannot tell)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from dynaq.clock import ManualClock
from dynaq.core import keys
from dynaq.errors import StorageUnavailable
from dynaq.node import Node
from dynaq.services.batches.hooks import completion_publisher
from dynaq.services.batches.records import Completion
from dynaq.services.batches.service import BatchService
from dynaq.storage.memory import MemoryStore
from tests.fixtures.nodes import node_config

WALL = 1_790_000_000_000


@pytest.mark.parametrize("step_ms", [3_600_000, -3_600_000])
async def test_a_repeated_delivery_after_a_stepped_restart_publishes_nothing(
    tmp_path: Path, step_ms: int
) -> None:
    store = MemoryStore()
    first = Node(node_config(tmp_path / "first"), clock=ManualClock(wall_ms=WALL), store=store)
    await first.start()
    try:
        await first.catalog.create_queue("events")
        await first.catalog.create_topic("done")
        await first.catalog.subscribe("done", "events")
        batch_id = await first.batches.open("exact", "k")
        done = Completion(batch_id=batch_id, user_key="k", completed_ms=WALL)
        await completion_publisher(store, first.topics, "done", first.batches)(done)
    finally:
        await first.stop()  # as if killed before the header was marked announced
    # The same store, a node whose clock reads an hour apart: the dedup record
    # sits in a time bucket it does not look in; the published marker does not.
    clock = ManualClock(wall_ms=WALL + step_ms)
    second = Node(node_config(tmp_path / "second"), clock=clock, store=store)
    await second.start()
    try:
        # A new process: the first one's claim is not its own; it has run out (+1 h)
        # or ends implausibly far ahead (-1 h), so the second may deliver at once.
        await completion_publisher(store, second.topics, "done", second.batches)(done)
        got = await second.queues.receive("events", 10)
        assert [json.loads(m.body) for m in got] == [
            {"batchId": batch_id, "userKey": "k", "completedAt": WALL}
        ]
        assert await store.get(keys.batch_published(batch_id)) is not None
    finally:
        await second.stop()


async def test_two_nodes_delivering_one_completion_at_once_publish_one_event(
    tmp_path: Path,
) -> None:
    """The flipping node's relay and a restarted node (or the reaper) deliver the same
    completion at the same moment: the header claim lets one publish; the other
    fails retriably, and its retry finds the published marker."""
    store = MemoryStore()
    clock = ManualClock(wall_ms=WALL)
    node = Node(node_config(tmp_path / "n"), clock=clock, store=store)
    await node.start()
    try:
        await node.catalog.create_queue("events")
        await node.catalog.create_topic("done")
        await node.catalog.subscribe("done", "events")
        batch_id = await node.batches.open("exact", None)
        done = Completion(batch_id=batch_id, user_key=None, completed_ms=WALL)
        # Another process on the same store: another claimant.
        other = BatchService(store, clock, node.view, node.metrics)
        mine = completion_publisher(store, node.topics, "done", node.batches)
        theirs = completion_publisher(store, node.topics, "done", other)
        results = await asyncio.gather(mine(done), theirs(done), return_exceptions=True)
        refused = [r for r in results if isinstance(r, StorageUnavailable)]
        assert len(refused) == 1 and results.count(None) == 1, results
        await theirs(done)  # the retry: the marker is there, nothing is published
        await mine(done)
        got = await node.queues.receive("events", 10)
        assert [json.loads(m.body)["batchId"] for m in got] == [batch_id]
        # The loser's claim is refused only while the winner's runs: after it, a
        # delivery by another claimant may go ahead (and finds the marker).
        clock.advance(16.0)
        await theirs(done)
    finally:
        await node.stop()
