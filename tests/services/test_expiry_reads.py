"""An expired in-flight message whose re-read fails is served by the next receive."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from dynaq.clock import ManualClock
from dynaq.core.messages import NewMessage
from dynaq.errors import StorageUnavailable
from dynaq.node import Node
from dynaq.storage.base import Item
from dynaq.storage.memory import MemoryStore
from tests.fixtures.nodes import node_config


class OneFailedRead(MemoryStore):
    """Fails the next ``get_many`` when armed (the store blinking for one call)."""

    armed = False

    async def get_many(self, keys: Sequence[bytes]) -> list[Item | None]:
        if self.armed:
            self.armed = False
            raise StorageUnavailable("the store blinked")
        return await super().get_many(keys)


async def test_an_expired_message_survives_a_failed_reread(tmp_path: Path) -> None:
    store, clock = OneFailedRead(), ManualClock()
    node = Node(node_config(tmp_path), clock=clock, store=store)
    await node.start()
    try:
        await node.catalog.create_queue("q")
        (mid,) = await node.queues.enqueue("q", [NewMessage(b"x")])
        (first,) = await node.queues.receive("q", 1, visibility_timeout_s=5)
        assert first.id == mid
        clock.advance(6)  # expired: the next receive re-reads it from the store
        store.armed = True
        with pytest.raises(StorageUnavailable):
            await node.queues.receive("q", 1)
        state = node.queues.states.state(await node.catalog.queue("q"))
        assert state.next_deadline() is not None  # still on the deadline heap
        (again,) = await node.queues.receive("q", 1)  # from the heap, not a later scan
        assert again.id == mid and again.receive_count == 2
    finally:
        await node.stop()
