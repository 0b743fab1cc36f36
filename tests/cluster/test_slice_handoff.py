"""In-flight state follows lanes to a member that joins (or rejoins).

Two nodes over one shared store with the ring set by hand, as
``test_two_nodes``; a joiner is marked out of the ring until its view holds
the ring, as ``Node.start`` does around the gossip join.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from dynaq.clock import SystemClock
from dynaq.cluster.hints import HttpPeerHints
from dynaq.cluster.leave_handover import hand_over
from dynaq.core import keys
from dynaq.core.hints import HandoverEntry
from dynaq.core.ids import IdGenerator
from dynaq.core.messages import Message, NewMessage
from dynaq.core.peer_auth import PeerSigner, derive_peer_key
from dynaq.errors import NotServing
from dynaq.node import Node
from dynaq.storage.base import Item
from dynaq.storage.memory import MemoryStore
from tests.fixtures.nodes import hinted_pair, node_config

SECRET = "handoff-secret"
SIGNER = PeerSigner(derive_peer_key(SECRET), SystemClock().wall_ms)


@pytest.fixture
async def lone_and_joiner(tmp_path: Path) -> AsyncIterator[tuple[Node, Node]]:
    """``a`` serves the ring alone; ``b`` is started but has not joined it."""
    async with hinted_pair(tmp_path, SIGNER, SECRET) as (a, b):
        b.queues.receiver.in_ring = False
        yield a, b


async def _take_all(node: Node, vt: float) -> list[Message]:
    got: list[Message] = []
    while batch := await node.queues.receive("q", 100, visibility_timeout_s=vt):
        got += batch
    return got


async def _fill(node: Node, batches: int) -> list[int]:
    ids: list[int] = []
    for _ in range(batches):
        node.queues.writer.ids._left_in_lane = 0  # hop lanes: both future slices get some
        ids += await node.queues.enqueue("q", [NewMessage(b"x")] * 5)
    return ids


async def _handed_off(node: Node) -> None:
    """Until ``node`` no longer waits for a handoff (bounded: it comes in milliseconds)."""
    for _ in range(200):
        if not node.queues.handoff.holding():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the handoff never came")


def _join(a: Node, b: Node) -> None:
    """b's view holds the ring (it joined), then it serves; a sees b afterwards."""
    b.view.replace([a.view.me, b.view.me])
    b.queues.receiver.in_ring = True


async def test_a_joiner_does_not_serve_messages_in_flight_at_the_previous_owner(
    lone_and_joiner: tuple[Node, Node],
) -> None:
    a, b = lone_and_joiner
    await a.catalog.create_queue("q")
    await _fill(a, 40)
    held_by_a = await _take_all(a, vt=60)
    assert len(held_by_a) == 200
    fresh = await _fill(a, 40)
    _join(a, b)
    assert await b.queues.receive("q", 100) == []  # held: a has not handed over yet
    a.view.replace([a.view.me, b.view.me])  # a sees b: gives b its lanes and their state
    await _handed_off(b)
    served_by_b = await _take_all(b, vt=60)
    ids_b = {m.id for m in served_by_b}
    assert ids_b and ids_b <= set(fresh)  # never one a's consumers still hold
    # A receipt a handed out deletes the message at b, its new owner.
    info = await b.catalog.queue("q")
    moved = [m for m in held_by_a if (m.id >> 53) in b.view.my_slice]
    assert moved
    removed, stale = await b.queues.receipts.delete(info, [(m.id, m.delivery) for m in moved])
    assert sorted(removed) == sorted(m.id for m in moved) and stale == []


async def test_a_joiner_serves_after_its_hold_when_no_handoff_comes(
    lone_and_joiner: tuple[Node, Node],
) -> None:
    """The previous owner never hands over (a lost message, an older version): the
    joiner serves once its hold runs out, as it did before handoffs existed."""
    a, b = lone_and_joiner
    b.queues.handoff._hold_s = 0.3
    await a.catalog.create_queue("q")
    ids = await _fill(a, 20)
    _join(a, b)  # a never learns of b here
    assert await b.queues.receive("q", 100) == []
    got = await b.queues.receive("q", 100, wait_time_s=2)
    assert got and {m.id for m in got} <= set(ids)


async def test_a_graceful_leave_keeps_receipts_working(
    lone_and_joiner: tuple[Node, Node],
) -> None:
    """The leave handover: a receipt the leaving node handed out still deletes the
    message at its next owner (the taken entry has no delivery of its own)."""
    a, b = lone_and_joiner
    _join(a, b)
    a.view.replace([a.view.me, b.view.me])
    await a.catalog.create_queue("q")
    await _fill(a, 20)
    await _handed_off(b)
    taken = await _take_all(b, vt=60)
    assert taken
    assert await hand_over(b.queues.hints.handover(), SIGNER) == 1
    a.view.replace([a.view.me])  # b has left
    info = await a.catalog.queue("q")
    removed, stale = await a.queues.receipts.delete(info, [(m.id, m.delivery) for m in taken])
    assert sorted(removed) == sorted(m.id for m in taken) and stale == []


async def test_the_last_member_to_stop_parks_in_flight_state_for_the_first_back(
    tmp_path: Path,
) -> None:
    """A whole ring stopped gracefully (members in turn: each hands over to those
    left, the last has no one): the last parks its in-flight table in the shared
    store, and the first member back takes it before serving."""
    store = MemoryStore()
    gossip = {"key": SECRET}
    first = Node(node_config(tmp_path / "a", node={"name": "node-a"}, gossip=gossip), store=store)
    await first.start()
    hints = HttpPeerHints(SIGNER)
    await hints.start()
    first.queues.set_peer_hints(hints)
    await first.catalog.create_queue("q")
    await _fill(first, 10)
    taken = await _take_all(first, vt=60)
    assert len(taken) == 50
    await hints.stop()
    await first.stop()
    back = Node(node_config(tmp_path / "b", node={"name": "node-b"}, gossip=gossip), store=store)
    back.queues.set_ids(IdGenerator(SystemClock(), writer=1))
    await back.start()
    try:
        assert await back.queues.receive("q", 100) == []  # still invisible
        info = await back.catalog.queue("q")
        removed, stale = await back.queues.receipts.delete(
            info, [(m.id, m.delivery) for m in taken]
        )
        assert sorted(removed) == sorted(m.id for m in taken) and stale == []
    finally:
        await back.stop()


async def test_receipts_of_earlier_deliveries_stay_refused_after_a_handoff(
    lone_and_joiner: tuple[Node, Node],
) -> None:
    """The handoff carries each message's delivery number: the new owner takes the
    current receipts and refuses earlier ones, as the previous owner did."""
    a, b = lone_and_joiner
    await a.catalog.create_queue("q")
    await _fill(a, 20)
    first = await _take_all(a, vt=0.05)
    await asyncio.sleep(0.1)  # those deliveries' visibility ran out
    current = await _take_all(a, vt=60)
    assert {m.id for m in current} == {m.id for m in first}
    _join(a, b)
    a.view.replace([a.view.me, b.view.me])
    await _handed_off(b)
    info = await b.catalog.queue("q")
    moved = {m.id for m in current if (m.id >> 53) in b.view.my_slice}
    assert moved
    old = [(m.id, m.delivery) for m in first if m.id in moved]
    removed, stale = await b.queues.receipts.delete(info, old)
    assert removed == [] and sorted(stale) == sorted(moved)
    now = [(m.id, m.delivery) for m in current if m.id in moved]
    removed, stale = await b.queues.receipts.delete(info, now)
    assert sorted(removed) == sorted(moved) and stale == []


async def test_a_purge_through_one_member_clears_what_the_others_hold_in_flight(
    lone_and_joiner: tuple[Node, Node],
) -> None:
    """A purge removes messages by key range, without their ids: the members that
    serve them are asked to check their in-flight entries, so the purged ones stop
    counting (and blocking their groups) at once, not at their old deadlines."""
    a, b = lone_and_joiner
    _join(a, b)
    a.view.replace([a.view.me, b.view.me])
    await _handed_off(b)
    info = await a.catalog.create_queue("q", {"fifo": True})
    for i in range(8):
        a.queues.writer.ids._left_in_lane = 0
        await a.queues.enqueue("q", [NewMessage(b"m", group=f"g{i}")] * 3)
    held = await b.queues.receive("q", 100, visibility_timeout_s=600)
    assert held and b.queues.in_flight(info) == len(held)
    task = await a.queues.tasks.start_purge(info)
    for _ in range(300):  # bounded: the purge is a background task
        if (await a.queues.tasks.get(task["id"]))["state"] == "done":
            break
        await asyncio.sleep(0.01)
    for _ in range(200):  # the hint reaches b within milliseconds
        if b.queues.in_flight(info) == 0:
            break
        await asyncio.sleep(0.01)
    assert b.queues.in_flight(info) == 0
    fresh = {m.group for m in held}
    for g in fresh:
        a.queues.writer.ids._left_in_lane = 0
        await a.queues.enqueue("q", [NewMessage(b"after", group=g)])
    got = await b.queues.receive("q", 100, visibility_timeout_s=600)
    got += await a.queues.receive("q", 100, visibility_timeout_s=600)
    assert {m.group for m in got} >= fresh  # no group waits for a purged message


class PausedReads(MemoryStore):
    """A memory store that holds the answer of its next read of one queue's messages
    (a scan or a multi-get) until :attr:`resume` is set: a receive whose read is
    still in flight when the ring changes."""

    def __init__(self) -> None:
        super().__init__()
        self.prefix: bytes | None = None
        self.paused = asyncio.Event()
        self.resume = asyncio.Event()

    async def _hold(self, key: bytes) -> None:
        if self.prefix is not None and key.startswith(self.prefix):
            self.prefix = None
            self.paused.set()
            await self.resume.wait()

    async def scan(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        rows = await super().scan(start, end, limit)
        await self._hold(start)
        return rows

    async def get_many(self, keys: Sequence[bytes]) -> list[Item | None]:
        items = await super().get_many(keys)
        if keys:
            await self._hold(keys[0])
        return items


@pytest.mark.parametrize("expired", [False, True], ids=["scanned", "visibility-expired"])
async def test_a_read_in_flight_when_lanes_move_away_serves_none_of_them(
    tmp_path: Path, expired: bool
) -> None:
    """A receive whose store read was under way when the ring gave half of this
    node's lanes to a joiner: what it read in those lanes is the joiner's to serve
    (it holds their in-flight state), so the old owner serves none of it. Each
    message is served once between the two (in a 3-node ring under kill -9 the old
    owner served such messages again, beside their new owner)."""
    store = PausedReads()
    async with hinted_pair(tmp_path, SIGNER, SECRET, store) as (a, b):
        b.queues.receiver.in_ring = False
        info = await a.catalog.create_queue("q")
        ids = await _fill(a, 12)
        if expired:
            assert len(await _take_all(a, vt=60)) == len(ids)
            # Released: each is visible again, from a's in-flight table.
            assert len(await a.queues.change_visibility("q", ids, 0)) == len(ids)
        store.prefix = keys.message(info.number, 0)[:5]
        reading = asyncio.create_task(a.queues.receive("q", 100, visibility_timeout_s=60))
        await asyncio.wait_for(store.paused.wait(), 5)
        _join(a, b)
        a.view.replace([a.view.me, b.view.me])  # a gives b half its lanes mid-read
        store.resume.set()
        by_a = {m.id for m in await reading}
        by_a |= {m.id for m in await _take_all(a, vt=60)}
        assert all((i >> 53) in a.view.my_slice for i in by_a)
        await _handed_off(b)
        by_b = {m.id for m in await _take_all(b, vt=60)}
        assert by_a and by_b and not by_a & by_b
        assert by_a | by_b == set(ids)


@pytest.mark.parametrize("expired", [False, True], ids=["scanned", "visibility-expired"])
async def test_a_read_in_flight_when_the_node_drains_serves_nothing_left_out_of_its_handover(
    tmp_path: Path, expired: bool
) -> None:
    """A graceful leave hands the in-flight table over as the drain begins; a receive
    whose read was under way then serves nothing more (what it served would be missing
    from the handover, and its next owner would serve it again at once)."""
    store = PausedReads()
    async with hinted_pair(tmp_path, SIGNER, SECRET, store) as (a, b):
        _join(a, b)
        a.view.replace([a.view.me, b.view.me])
        await _handed_off(b)
        info = await a.catalog.create_queue("q")
        await _fill(a, 12)
        if expired:
            taken = await _take_all(a, vt=60)
            assert taken  # then released: visible again, from a's in-flight table
            assert await a.queues.change_visibility("q", [m.id for m in taken], 0)
        store.prefix = keys.message(info.number, 0)[:5]
        reading = asyncio.create_task(a.queues.receive("q", 100, visibility_timeout_s=60))
        await asyncio.wait_for(store.paused.wait(), 5)
        a.queues.drain()
        a.queues.hints.handover()  # what the leave sends: from now on a serves nothing
        store.resume.set()
        served = {m.id for m in await reading}
        assert not served  # what it read is the next owners' to serve (expired ones were handed)


async def test_a_leaving_node_sends_receipts_and_visibility_changes_where_its_entries_went(
    lone_and_joiner: tuple[Node, Node],
) -> None:
    """Between its handover and its peers seeing it leave, receipts still reach the
    leaving node: it no longer decides them from its own table but forwards them to
    the lane's next owner, so an extended visibility holds there and a deleted group
    message unblocks its group there at once (not at the old deadline)."""
    a, b = lone_and_joiner
    _join(a, b)
    a.view.replace([a.view.me, b.view.me])
    await _handed_off(b)
    info = await a.catalog.create_queue("q")
    for g in ("x", "y"):
        for _ in range(2):
            b.queues.writer.ids._left_in_lane = 0
            await b.queues.enqueue("q", [NewMessage(b"1", group=g), NewMessage(b"2", group=g)])
    held = await b.queues.receive("q", 10, visibility_timeout_s=1.0)  # each group's first
    assert {m.group for m in held} == {"x", "y"} and len(held) == 2
    assert await hand_over(b.queues.hints.handover(), SIGNER) == 1  # b leaves: a takes over
    x, y = sorted(held, key=lambda m: m.group or "")
    changed, stale = await b.queues.receipts.change_visibility(info, [(x.id, x.delivery)], 60)
    assert changed == [x.id] and stale == []
    removed, stale = await b.queues.receipts.delete(info, [(y.id, y.delivery)])
    assert removed == [y.id] and stale == []
    a.view.replace([a.view.me])  # a sees b gone
    got = await a.queues.receive("q", 10, visibility_timeout_s=60)
    assert [(m.group, m.body) for m in got] == [("y", b"2")]  # y's next, at once
    await asyncio.sleep(1.2)  # x's first delivery would have expired here
    assert await a.queues.receive("q", 10, visibility_timeout_s=60) == []


@pytest.mark.parametrize("move", ["join", "leave"])
async def test_a_moving_lane_keeps_the_receive_counts_of_messages_visible_again(
    lone_and_joiner: tuple[Node, Node], move: str
) -> None:
    """A message whose visibility ran out and that nobody received again is still
    counted: the lane's next owner serves it with the next receive count (a reset
    count let a poison message past its dead-letter limit once per ring change)."""
    a, b = lone_and_joiner
    await a.catalog.create_queue("q")
    if move == "leave":
        _join(a, b)
        a.view.replace([a.view.me, b.view.me])
        await _handed_off(b)
    ids = await _fill(a, 12)
    giver, taker = (a, b) if move == "join" else (b, a)
    first = await _take_all(giver, vt=60)
    assert first and {m.receive_count for m in first} == {1}
    # Released: visible again (the entries stay, with their counts), not received again.
    released = await giver.queues.change_visibility("q", [m.id for m in first], 0)
    assert sorted(released) == sorted(m.id for m in first)
    if move == "join":
        _join(a, b)
        a.view.replace([a.view.me, b.view.me])
        await _handed_off(b)
        moved = {m.id for m in first if (m.id >> 53) in b.view.my_slice}
    else:
        assert await hand_over(b.queues.hints.handover(), SIGNER) == 1
        a.view.replace([a.view.me])
        moved = {m.id for m in first}
    assert moved
    again = [m for m in await _take_all(taker, vt=60) if m.id in moved]
    assert {m.id for m in again} == moved and {m.receive_count for m in again} == {2}
    assert set(ids) >= moved


async def test_a_node_that_handed_its_table_over_refuses_entries_handed_to_it(
    lone_and_joiner: tuple[Node, Node],
) -> None:
    """Two members leaving at once: an entry handed to one whose own handover is
    already computed would be lost at its exit, so it is refused (503) and the
    sender parks it, also when the handover came in before the drain began and its
    queue lookup was still running when it did."""
    a, b = lone_and_joiner
    _join(a, b)
    a.view.replace([a.view.me, b.view.me])
    await _handed_off(b)
    await a.catalog.create_queue("q")
    entry = HandoverEntry(1 << 53, 30.0, 1, None, None, 7)
    a.queues.hints.handover()  # a leaves
    with pytest.raises(NotServing):
        await a.queues.hints.apply_handover("q", [entry])
    info = await a.catalog.queue("q")
    assert a.queues.in_flight(info) == 0


async def test_an_entry_handed_over_for_a_message_deleted_meanwhile_holds_nothing_back(
    lone_and_joiner: tuple[Node, Node],
) -> None:
    """The sender deleted a message after computing its handover, and the "deleted"
    hint overtook the entries (they travel apart): the receiver does not take an
    entry whose message is gone from the store, so the rest of its group is served
    at once instead of after the delete's 30 s hold. An entry for a message still
    stored is taken, and holds its group as before."""
    a, _ = lone_and_joiner
    await a.catalog.create_queue("q")
    first, second, third = await a.queues.enqueue(
        "q", [NewMessage(b"1", group="g"), NewMessage(b"2", group="g"), NewMessage(b"3", group="g")]
    )
    info = await a.catalog.queue("q")
    assert await a.queues.delete("q", [first]) == [first]
    a.queues.hints.apply_hints("q", [first], [])  # the hint, ahead of the entries
    await a.queues.hints.apply_handover("q", [HandoverEntry(first, 30.0, 1, "g", None, 7)])
    assert a.queues.in_flight(info) == 0
    got = await a.queues.receive("q", 10, visibility_timeout_s=60)
    assert [m.id for m in got] == [second]
    # Still stored: taken over, in flight for its 30 s.
    await a.queues.hints.apply_handover("q", [HandoverEntry(third, 30.0, 2, "g", None, 9)])
    assert a.queues.in_flight(info) == 2
