"""Two nodes over one shared store: slices, one owner per message, hints between nodes.

The ring is set by hand here (the gossip tests cover membership itself), so
these tests pin the queue service's cluster behaviour on its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from dynaq.clock import SystemClock
from dynaq.cluster.leave_handover import hand_over
from dynaq.core.ids import group_lane
from dynaq.core.messages import NewMessage
from dynaq.core.peer_auth import PEER_AUTH_HEADER, PeerSigner, derive_peer_key
from dynaq.node import Node
from tests.fixtures.nodes import hinted_pair

SECRET = "two-nodes-secret"
SIGNER = PeerSigner(derive_peer_key(SECRET), SystemClock().wall_ms)


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[Node, Node]]:
    async with hinted_pair(tmp_path, SIGNER, SECRET) as (a, b):
        for n in (a, b):
            n.view.replace([a.view.me, b.view.me])
        yield a, b


async def _drain(node: Node, queue: str) -> list[int]:
    got: list[int] = []
    while batch := await node.queues.receive(queue, 100):
        got.extend(m.id for m in batch)
    return got


async def test_each_message_served_by_exactly_its_owner(pair: tuple[Node, Node]) -> None:
    a, b = pair
    await a.catalog.create_queue("q")
    ids: list[int] = []
    for i in range(60):  # many small batches: lanes spread over both slices
        writer = a if i % 2 else b
        writer.queues.writer.ids._left_in_lane = 0  # hop lanes on every batch
        ids += await writer.queues.enqueue("q", [NewMessage(b"m")] * 5)
    got_a = await _drain(a, "q")
    got_b = await _drain(b, "q")
    assert got_a and got_b
    assert not set(got_a) & set(got_b)
    assert sorted(got_a + got_b) == sorted(ids)
    sa, sb = a.view.my_slice, b.view.my_slice
    assert all((i >> 53) in sa for i in got_a) and all((i >> 53) in sb for i in got_b)
    assert sa.hi == sb.lo or sb.hi == sa.lo


async def test_delete_on_other_node_unblocks_group_at_once(pair: tuple[Node, Node]) -> None:
    a, b = pair
    await a.catalog.create_queue("q")
    group = next(f"g{i}" for i in range(1000) if group_lane(f"g{i}") in b.view.my_slice)
    await a.queues.enqueue("q", [NewMessage(b"%d" % i, group=group) for i in range(3)])
    assert await a.queues.receive("q", 10) == []  # a does not own the group's lane
    first = await b.queues.receive("q", 10)
    assert [m.body for m in first] == [b"0"]
    await a.queues.delete("q", [first[0].id])  # delete lands on the other node
    for _ in range(100):  # the hint arrives within milliseconds, not a visibility timeout
        nxt = await b.queues.receive("q", 10)
        if nxt:
            break
        await asyncio.sleep(0.01)
    assert [m.body for m in nxt] == [b"1"]


async def test_membership_change_moves_slices(pair: tuple[Node, Node]) -> None:
    a, b = pair
    await a.catalog.create_queue("q")
    ids = []
    for _ in range(20):
        a.queues.writer.ids._left_in_lane = 0
        ids += await a.queues.enqueue("q", [NewMessage(b"x")] * 5)
    got_b = await _drain(b, "q")
    a.view.replace([a.view.me])  # b left: a owns everything now
    got_a = await _drain(a, "q")
    # a serves everything, including what b had in flight (at-least-once)
    assert sorted(got_a) == sorted(ids)
    assert set(got_b) <= set(got_a)


async def test_hints_route_rejects_garbage(pair: tuple[Node, Node]) -> None:
    a, _ = pair
    garbage = b"\xc1"
    signed = SIGNER.header("POST", a.view.me.http_addr, "/internal/v1/hints", garbage)
    async with aiohttp.ClientSession(f"http://127.0.0.1:{a.port}") as s:
        async with s.post("/internal/v1/hints", data=garbage) as r:
            assert r.status == 401  # unsigned: refused before the body is looked at
        async with s.post(
            "/internal/v1/hints", data=garbage, headers={PEER_AUTH_HEADER: signed}
        ) as r:
            assert r.status == 422  # signed by a peer, but not a hints message


async def test_graceful_leave_hands_in_flight_messages_over(pair: tuple[Node, Node]) -> None:
    """b leaves gracefully: a keeps b's in-flight messages invisible until their
    deadlines (no duplicate while b's consumers still work on them), then serves them."""
    a, b = pair
    await a.catalog.create_queue("q")
    ids = []
    for _ in range(20):
        a.queues.writer.ids._left_in_lane = 0
        ids += await a.queues.enqueue("q", [NewMessage(b"x", {"k": "v"})] * 5)
    taken_by_b: list[int] = []
    while batch := await b.queues.receive("q", 100, visibility_timeout_s=1.5):
        taken_by_b += [m.id for m in batch]
    assert taken_by_b
    assert (
        await hand_over(b.queues.hints.handover(), SIGNER) == 1
    )  # what Node.stop does before leaving
    info = await a.catalog.queue("q")
    handed = a.queues.states.state(info).inflight
    # Attributes travel too: a delete on a acks batch items without reading them.
    assert all(handed[i].attributes == {"k": "v"} for i in taken_by_b)
    a.view.replace([a.view.me])  # b has left
    got_a = await _drain(a, "q")
    assert not set(got_a) & set(taken_by_b)  # still invisible
    assert sorted(got_a + taken_by_b) == sorted(ids)
    await asyncio.sleep(1.6)
    again = await _drain(a, "q")  # the deadlines passed: served again, counted
    assert sorted(again) == sorted(taken_by_b)
