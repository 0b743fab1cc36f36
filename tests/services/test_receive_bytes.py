"""A receive stops taking messages once their bodies pass ``http.max_receive_bytes``:
a receive of 1000 large messages must not build a response of hundreds of MiB
(and hold the event loop while it does). Messages it does not take stay visible
and in order; expired in-flight messages it does not take stay first in line;
a message larger than the whole budget is still served (alone)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dynaq.clock import ManualClock
from dynaq.core.messages import NewMessage
from dynaq.node import Node
from dynaq.services.queues.receive_budget import ReceiveBudget
from dynaq.storage.base import Item
from dynaq.storage.memory import MemoryStore
from tests.fixtures.nodes import node_config

KIB = 1024


async def _node(tmp_path: Path, clock: ManualClock) -> Node:
    config = node_config(
        tmp_path, http={"max_receive_bytes": 512 * KIB, "max_message_bytes": 1024 * KIB}
    )
    node = Node(config, clock=clock)
    await node.start()
    await node.catalog.create_queue("q")
    return node


async def test_a_receive_takes_messages_up_to_its_byte_budget_and_leaves_the_rest(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    node = await _node(tmp_path, clock)
    try:
        body = b"x" * (100 * KIB)
        ids = await node.queues.enqueue("q", [NewMessage(body) for _ in range(30)])
        seen: list[int] = []
        sizes: list[int] = []
        while len(seen) < 30:
            got = await node.queues.receive("q", 1000, visibility_timeout_s=60)
            assert got, "a receive found nothing with messages left"
            sizes.append(len(got))
            seen.extend(m.id for m in got)
        # 512 KiB of 100 KiB bodies: the sixth passes the budget and ends the receive.
        assert sizes == [6, 6, 6, 6, 6]
        assert sorted(seen) == sorted(ids) and len(set(seen)) == 30
        assert await node.queues.receive("q", 1000) == []

        # Expired in flight: served first again, still within the budget, and the
        # ones a receive leaves are the next receive's, at once.
        clock.advance(61)
        again: list[int] = []
        for _ in range(5):
            got = await node.queues.receive("q", 1000, visibility_timeout_s=60)
            assert len(got) == 6
            assert all(m.receive_count == 2 for m in got)
            again.extend(m.id for m in got)
        assert sorted(again) == sorted(ids)
    finally:
        await node.stop()


async def test_a_message_larger_than_the_budget_is_served_alone(tmp_path: Path) -> None:
    clock = ManualClock()
    node = await _node(tmp_path, clock)
    try:
        big, small = b"b" * (600 * KIB), b"s" * KIB
        (first, second) = await node.queues.enqueue("q", [NewMessage(big), NewMessage(small)])
        (got,) = await node.queues.receive("q", 10)
        assert got.id == first and got.body == big
        (got,) = await node.queues.receive("q", 10)
        assert got.id == second
    finally:
        await node.stop()


async def test_small_messages_fill_a_receive_as_before(tmp_path: Path) -> None:
    node = await _node(tmp_path, ManualClock())
    try:
        await node.queues.enqueue("q", [NewMessage(b"m" * 256) for _ in range(1000)])
        assert len(await node.queues.receive("q", 1000)) == 1000
    finally:
        await node.stop()


class CountingStore(MemoryStore):
    """Counts the bytes of the message rows receives read."""

    read_bytes = 0

    async def scan(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        rows = await super().scan(start, end, limit)
        self.read_bytes += sum(len(v) for _, v in rows)
        return rows

    async def get_many(self, keys: Sequence[bytes]) -> list[Item | None]:
        items = await super().get_many(keys)
        self.read_bytes += sum(len(i.value) for i in items if i is not None)
        return items


async def test_a_receive_reads_about_what_its_budget_takes(tmp_path: Path) -> None:
    """Rows are read whole: a receive of 1000 must not read 1000 large rows to serve
    six of them (it read 256 MiB to answer 8 MiB, and held the loop for a second).
    Pages stay budget-sized also past rows in flight (a partition split moves a
    scan back over them): here 300 rows (30 MB) before, at most 24 now."""
    store, clock = CountingStore(), ManualClock()
    config = node_config(
        tmp_path, http={"max_receive_bytes": 512 * KIB, "max_message_bytes": 1024 * KIB}
    )
    node = Node(config, clock=clock, store=store)
    await node.start()
    try:
        await node.catalog.create_queue("q")
        body = b"x" * (100 * KIB)
        for _ in range(6):
            await node.queues.enqueue("q", [NewMessage(body) for _ in range(50)])
        await node.queues.receive("q", 1000, visibility_timeout_s=60)  # learns the size
        for _ in range(3):
            store.read_bytes = 0
            assert len(await node.queues.receive("q", 1000, visibility_timeout_s=60)) == 6
            assert store.read_bytes <= 24 * 101 * KIB, store.read_bytes
        clock.advance(61)  # all 24 in flight expire: served from the deadline heap
        store.read_bytes = 0
        assert len(await node.queues.receive("q", 1000, visibility_timeout_s=60)) == 6
        assert store.read_bytes <= 8 * 101 * KIB, store.read_bytes
    finally:
        await node.stop()


def test_pages_are_sized_by_the_budget_but_never_below_64_kib_of_rows() -> None:
    unknown = ReceiveBudget(512 * KIB, 0.0)
    assert unknown.rows(1000) == ReceiveBudget.UNKNOWN_ROWS
    big = ReceiveBudget(512 * KIB, 100 * KIB)
    assert big.rows(1000) == 6  # one past the five the budget takes
    big.take(100 * KIB)
    assert big.rows(1000) == 5
    # A tiny budget over small rows: a skipping scan still reads 64 KiB a page.
    small = ReceiveBudget(100, 64.0)
    assert small.rows(10) == 10
    assert small.rows(5000) == 1024
