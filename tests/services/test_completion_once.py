"""A batch's completion event is published once, even when its delivery is repeated
by a node restarted with its clock stepped (the dedup window alone cannot tell)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dynaq.clock import ManualClock
from dynaq.core import keys
from dynaq.node import Node
from dynaq.services.batches.hooks import completion_publisher
from dynaq.services.batches.records import Completion
from dynaq.storage.memory import MemoryStore
from tests.fixtures.nodes import node_config

WALL = 1_790_000_000_000


@pytest.mark.parametrize("step_ms", [3_600_000, -3_600_000])
async def test_a_repeated_delivery_after_a_stepped_restart_publishes_nothing(
    tmp_path: Path, step_ms: int
) -> None:
    store = MemoryStore()
    done = Completion(batch_id=7, user_key="k", completed_ms=WALL)
    first = Node(node_config(tmp_path / "first"), clock=ManualClock(wall_ms=WALL), store=store)
    await first.start()
    try:
        await first.catalog.create_queue("events")
        await first.catalog.create_topic("done")
        await first.catalog.subscribe("done", "events")
        await completion_publisher(store, first.topics, "done")(done)
    finally:
        await first.stop()  # as if killed before the header was marked announced
    # The same store, a node whose clock reads an hour apart: the dedup record
    # sits in a time bucket it does not look in; the published marker does not.
    clock = ManualClock(wall_ms=WALL + step_ms)
    second = Node(node_config(tmp_path / "second"), clock=clock, store=store)
    await second.start()
    try:
        await completion_publisher(store, second.topics, "done")(done)
        got = await second.queues.receive("events", 10)
        assert [m.body for m in got] == [
            b'{"batchId": 7, "userKey": "k", "completedAt": 1790000000000}'
        ]
        assert await store.get(keys.batch_published(7)) is not None
    finally:
        await second.stop()
