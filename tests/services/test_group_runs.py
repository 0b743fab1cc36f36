"""A receive that may take several messages of one group (SQS FIFO receives).

The group rule stays: a group's messages are served in order, and while any
of them is in flight (invisible) nothing else of the group is served. What
changes is that one receive may take a run of the group's next messages
together, in order, up to ``per_group``; the run is blocked for every other
receive until each of its messages is deleted or visible again.
"""

from __future__ import annotations

import asyncio
import random

from dynaq.clock import ManualClock
from dynaq.core.messages import Message, NewMessage
from dynaq.node import Node


def _bodies(msgs: list[Message]) -> list[bytes]:
    return [m.body for m in msgs]


async def _group(node: Node, group: str, n: int, q: str = "q") -> None:
    await node.queues.enqueue(
        q, [NewMessage(b"%s%d" % (group.encode(), i), group=group) for i in range(n)]
    )


async def test_one_receive_takes_a_run_of_each_group_in_order(node: Node) -> None:
    await node.catalog.create_queue("q")
    await _group(node, "a", 5)
    await _group(node, "b", 2)
    got = await node.queues.receive("q", 10, per_group=10)
    assert [m.body for m in got if m.group == "a"] == [b"a0", b"a1", b"a2", b"a3", b"a4"]
    assert [m.body for m in got if m.group == "b"] == [b"b0", b"b1"]
    assert await node.queues.receive("q", 10, per_group=10) == []
    await _group(node, "a", 1)  # "a0" again as a body: a later message of the group
    assert await node.queues.receive("q", 10, per_group=10) == []  # the run is in flight
    await node.queues.delete("q", [m.id for m in got])
    assert _bodies(await node.queues.receive("q", 10, per_group=10)) == [b"a0"]


async def test_per_group_caps_the_run_and_one_is_the_default(node: Node) -> None:
    await node.catalog.create_queue("q")
    await _group(node, "a", 6)
    assert _bodies(await node.queues.receive("q", 10, per_group=4)) == [b"a0", b"a1", b"a2", b"a3"]
    await node.catalog.create_queue("q2")
    await _group(node, "a", 3, "q2")
    assert _bodies(await node.queues.receive("q2", 10)) == [b"a0"]


async def test_a_partly_deleted_run_still_blocks_its_group(node: Node) -> None:
    await node.catalog.create_queue("q")
    await _group(node, "g", 5)
    run = await node.queues.receive("q", 3, per_group=10)
    assert _bodies(run) == [b"g0", b"g1", b"g2"]
    await node.queues.delete("q", [run[0].id])
    assert await node.queues.receive("q", 10, per_group=10) == []
    assert await node.queues.receive("q", 10) == []
    await node.queues.delete("q", [run[1].id, run[2].id])
    assert _bodies(await node.queues.receive("q", 10, per_group=10)) == [b"g3", b"g4"]


async def test_an_expired_run_is_served_again_first_and_then_continued(
    node: Node, clock: ManualClock
) -> None:
    await node.catalog.create_queue("q")
    await _group(node, "g", 5)
    run = await node.queues.receive("q", 3, visibility_timeout_s=5, per_group=10)
    await node.queues.delete("q", [run[0].id])
    clock.advance(6)
    again = await node.queues.receive("q", 10, per_group=10)
    assert [(m.body, m.receive_count) for m in again][:2] == [(b"g1", 2), (b"g2", 2)]
    # The rest of the group follows the run it continues, in order, or waits.
    assert _bodies(again) in ([b"g1", b"g2"], [b"g1", b"g2", b"g3", b"g4"])
    await node.queues.delete("q", [m.id for m in again])
    rest = await node.queues.receive("q", 10, per_group=10)
    assert _bodies(again + rest) == [b"g1", b"g2", b"g3", b"g4"]


async def test_a_released_later_message_waits_for_an_earlier_one_in_flight(
    node: Node, clock: ManualClock
) -> None:
    await node.catalog.create_queue("q")
    await _group(node, "g", 4)
    run = await node.queues.receive("q", 3, visibility_timeout_s=60, per_group=10)
    assert await node.queues.change_visibility("q", [run[2].id], 0) == [run[2].id]
    # g2 is visible, but g1 before it is still held by its consumer.
    assert await node.queues.receive("q", 10, per_group=10) == []
    assert await node.queues.receive("q", 10) == []
    await node.queues.delete("q", [run[0].id, run[1].id])
    again = await node.queues.receive("q", 10, per_group=10)
    assert (again[0].body, again[0].receive_count) == (b"g2", 2)
    assert _bodies(again) in ([b"g2"], [b"g2", b"g3"])


async def test_a_released_earlier_message_waits_for_a_later_one_in_flight(node: Node) -> None:
    """As on SQS: while any message of the group is invisible the group is blocked."""
    await node.catalog.create_queue("q")
    await _group(node, "g", 3)
    run = await node.queues.receive("q", 2, visibility_timeout_s=60, per_group=10)
    await node.queues.change_visibility("q", [run[0].id], 0)
    assert await node.queues.receive("q", 10, per_group=10) == []
    await node.queues.change_visibility("q", [run[1].id], 0)
    again = await node.queues.receive("q", 10, per_group=10)
    assert [(m.body, m.receive_count) for m in again][:2] == [(b"g0", 2), (b"g1", 2)]


async def test_concurrent_consumers_taking_runs_see_each_group_in_order(node: Node) -> None:
    await node.catalog.create_queue("q")
    groups = [f"k{i}" for i in range(8)]
    for seq in range(25):
        batch = [NewMessage(f"{k}:{seq}".encode(), group=k) for k in groups]
        random.shuffle(batch)
        await node.queues.enqueue("q", batch)
    seen: dict[str, list[int]] = {k: [] for k in groups}

    async def consumer() -> None:
        idle = 0
        for _ in range(2000):  # bounded: 200 messages need far fewer receives
            if idle >= 3:
                return
            msgs = await node.queues.receive("q", 10, per_group=10)
            if not msgs:
                idle += 1
                await asyncio.sleep(0)
                continue
            idle = 0
            for m in msgs:  # a consumer works through its run in order
                k, seq = m.body.decode().split(":")
                seen[k].append(int(seq))
                await asyncio.sleep(0)
            await node.queues.delete("q", [m.id for m in msgs])

    await asyncio.gather(*(consumer() for _ in range(4)))
    for k in groups:
        assert seen[k] == list(range(25)), k
