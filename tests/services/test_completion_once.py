"""A batch's completion event is published once, even when its delivery is repeated
by a node restarted with its clock stepped (the dedup window alone cannot tell)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from dynaq.clock import ManualClock
from dynaq.core import keys
from dynaq.core.membership import Member, MembershipView
from dynaq.errors import StorageUnavailable
from dynaq.metrics import NullMetrics
from dynaq.node import Node
from dynaq.services.batches.hooks import completion_publisher
from dynaq.services.batches.records import Completion
from dynaq.services.batches.service import BatchService
from dynaq.storage.base import Item
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


class _HeldHeaderRead(MemoryStore):
    """A memory store whose next batch header read, once armed, waits at a gate (a
    read on its way over the network while another node writes)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def get(self, key: bytes) -> Item | None:
        gate = self.gate
        if gate is not None and key.startswith(keys.BATCH_HEADER):
            self.gate = None
            self.entered.set()
            await gate.wait()
        return await super().get(key)


def _claimer(store: MemoryStore, clock: ManualClock) -> BatchService:
    """A process's batch service (another claimant) on ``store``, without a node."""
    return BatchService(
        store, clock, MembershipView(Member("n", "x:1")), NullMetrics(), reap_interval_s=0
    )


async def test_a_claim_written_while_a_rival_reads_the_header_is_honoured() -> None:
    """Two processes claim at once on one clock: the one whose header read returns
    after the other's claim was written must see a claim that is running (one
    publish), however late its own call read the clock."""
    store = _HeldHeaderRead()
    clock = ManualClock(wall_ms=WALL)
    first, second = _claimer(store, clock), _claimer(store, clock)
    batch_id = await first.open("exact", None)
    store.gate = gate = asyncio.Event()
    slow = asyncio.create_task(first.claim_completion_event(batch_id, 15.0))
    await store.entered.wait()  # the first has read the clock; its header read is out
    clock.advance(0.001)
    assert await second.claim_completion_event(batch_id, 15.0)
    gate.set()
    assert not await slow


@pytest.mark.parametrize("behind_ms", [1, 50, 2_000])
async def test_a_claim_from_a_clock_a_little_ahead_is_honoured(behind_ms: int) -> None:
    """Clocks of two nodes never agree to the millisecond: a claim that ends a little
    further ahead than its span by this node's clock is another node's running claim."""
    store = MemoryStore()
    ahead = _claimer(store, ManualClock(wall_ms=WALL + behind_ms))
    behind = _claimer(store, ManualClock(wall_ms=WALL))
    batch_id = await ahead.open("exact", None)
    assert await ahead.claim_completion_event(batch_id, 15.0)
    assert not await behind.claim_completion_event(batch_id, 15.0)
