"""Group lanes are read before their ids are drawn; a sole writer reads each once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dynaq.core.messages import NewMessage
from dynaq.node import Node
from dynaq.storage.memory import MemoryStore
from tests.fixtures.nodes import node_config


async def _lane_reads(node: Node, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Send grouped messages three times; return how many lanes each send read."""
    reads: list[int] = []
    real = node.store.last_keys

    async def counting(ranges: Any) -> Any:
        reads.append(len(ranges))
        return await real(ranges)

    monkeypatch.setattr(node.store, "last_keys", counting)
    await node.catalog.create_queue("g.fifo", {"fifo": True})
    info = await node.catalog.queue("g.fifo")
    for round_ in range(3):
        sends = [NewMessage(f"{round_}-{g}".encode(), group=f"g{g}") for g in range(8)]
        await node.queues.enqueue(info, sends)
    got: list[bytes] = []
    while batch := await node.queues.receive("g.fifo", 10):
        got.extend(m.body for m in batch)
        await node.queues.delete("g.fifo", [m.id for m in batch])
    assert sorted(got) == sorted(f"{r}-{g}".encode() for r in range(3) for g in range(8))
    return reads


async def test_a_sole_writer_reads_each_group_lane_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An embedded node of one worker is its store's only writer: after the first read
    of a lane, every id there is its own, so later sends skip the read."""
    node = Node(node_config(tmp_path))
    await node.start()
    try:
        reads = await _lane_reads(node, monkeypatch)
    finally:
        await node.stop()
    assert reads[0] > 0 and sum(reads[1:]) == 0


async def test_a_shared_store_is_read_on_every_grouped_send(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store other nodes may write (given to the node, as a ring's is) is read every
    time: another writer's clock may be ahead."""
    node = Node(node_config(tmp_path), store=MemoryStore())
    await node.start()
    try:
        reads = await _lane_reads(node, monkeypatch)
    finally:
        await node.stop()
    assert len(reads) == 3 and all(reads)
