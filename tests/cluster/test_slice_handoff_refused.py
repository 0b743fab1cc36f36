"""A lane handoff its new owner does not take (it is leaving too, 503; or it does
not answer) comes back to the sender instead of being lost.

Before, the sender dropped the entries of lanes it gave away as it sent them: a
refused release lost them, and their messages were served again at once at the
next start of a ring stopped at once (``tests/cluster/test_ring_stop.py`` saw 10
of 30 come back in 2 runs of 12). Two nodes over one shared store with the ring
set by hand, as ``test_slice_handoff``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from dynaq.clock import SystemClock
from dynaq.cluster.hints import HttpPeerHints
from dynaq.core import keys
from dynaq.core.hints import HandoverEntry
from dynaq.core.ids import LANE_SHIFT, IdGenerator
from dynaq.core.membership import Member
from dynaq.core.messages import Message, NewMessage
from dynaq.core.peer_auth import PeerSigner, derive_peer_key
from dynaq.node import Node
from dynaq.storage.memory import MemoryStore
from dynaq.testing.process import free_port
from tests.cluster.test_slice_handoff import PausedReads
from tests.fixtures.nodes import hinted_pair, node_config

SECRET = "refused-handoff-secret"
SIGNER = PeerSigner(derive_peer_key(SECRET), SystemClock().wall_ms)
# Sorts after node-a and node-b: with it in a's view, a gives b part of its lanes.
GONE = Member("node-c", f"127.0.0.1:{free_port()}")


async def _take_all(node: Node) -> list[Message]:
    got: list[Message] = []
    while batch := await node.queues.receive("q", 100, visibility_timeout_s=60):
        got += batch
    return got


async def _ring_of_two_with_a_holding(a: Node, b: Node) -> list[Message]:
    """a and b each see both; a holds everything of its slice in flight."""
    b.view.replace([a.view.me, b.view.me])
    a.view.replace([a.view.me, b.view.me])
    for _ in range(200):  # bounded: the handoff comes in milliseconds
        if not b.queues.handoff.holding():
            break
        await asyncio.sleep(0.01)
    await a.catalog.create_queue("q")
    for _ in range(40):
        a.queues.writer.ids._left_in_lane = 0  # hop lanes: every future slice gets some
        await a.queues.enqueue("q", [NewMessage(b"x")] * 5)
    taken = await _take_all(a)
    assert taken
    return taken


async def _until(check: object, what: str) -> None:
    for _ in range(300):  # bounded: a refusal comes back in milliseconds
        if callable(check) and check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(what)


async def test_entries_of_lanes_given_to_a_member_that_is_leaving_too_stay_in_flight_here(
    tmp_path: Path,
) -> None:
    async with hinted_pair(tmp_path, SIGNER, SECRET) as (a, b):
        taken = await _ring_of_two_with_a_holding(a, b)
        info = await a.catalog.queue("q")
        b.queues.drain()
        b.queues.hints.handover()  # b leaves: it refuses entries from now on (503)
        a.view.replace([a.view.me, b.view.me, GONE])  # part of a's lanes go to b
        moved = {m.id for m in taken if (m.id >> LANE_SHIFT) not in a.view.my_slice}
        assert moved
        await _until(lambda: a.queues.in_flight(info) == len(taken), "the release never came back")
        assert a.queues.handoff.returned == set()  # a is not leaving: nothing to park
        # b (and node-c) gone: every lane is a's, and what a held is still invisible.
        a.view.replace([a.view.me])
        served = {m.id for m in await _take_all(a)}
        assert served and not served & {m.id for m in taken}


async def test_a_release_that_comes_back_once_the_sender_began_to_leave_is_parked(
    tmp_path: Path,
) -> None:
    store = MemoryStore()
    async with hinted_pair(tmp_path, SIGNER, SECRET, store) as (a, b):
        taken = await _ring_of_two_with_a_holding(a, b)
        b.queues.drain()
        b.queues.hints.handover()
        a.view.replace([a.view.me, b.view.me, GONE])  # the release goes out in 5 ms...
        moved = {m.id for m in taken if (m.id >> LANE_SHIFT) not in a.view.my_slice}
        a.queues.drain()  # ...and a begins to leave first
        a.queues.hints.handover()
        await _until(lambda: a.queues.handoff.returned == moved, "the release never came back")
    # a parked them at its stop: the first node back keeps them invisible.
    back = Node(node_config(tmp_path / "back", node={"name": "node-d"}), store=store)
    back.queues.set_ids(IdGenerator(SystemClock(), writer=2))
    await back.start()
    try:
        served = {m.id for m in await _take_all(back)}
        assert not served & moved
    finally:
        await back.stop()


async def test_a_release_to_a_peer_that_does_not_answer_is_given_back() -> None:
    hints = HttpPeerHints(SIGNER, timeout_s=1.0)
    back: list[dict[str, list[HandoverEntry]]] = []
    hints.on_returned(back.append)
    await hints.start()
    try:
        entries = [HandoverEntry(i << LANE_SHIFT, 30.0, 1, None, None, 3) for i in range(1, 4)]
        hints.released(GONE, "node-a", {"q": entries})
        await hints.flush()
    finally:
        await hints.stop()
    assert back == [{"q": entries}]


async def test_a_lane_handoff_taken_over_while_the_ring_changes_goes_on_to_the_lanes_owner(
    tmp_path: Path,
) -> None:
    """b takes over a lane handoff; while it reads the store, the ring changes and
    gives those lanes to a. That change's release from b went out without them, so
    b passes them on to a once it holds them, instead of keeping them outside its
    slice where nobody serves them and a serves them again at once. (A 3-node ring
    restarted after a whole-ring stop did that in 1 run of 20.)"""
    store = PausedReads()
    async with hinted_pair(tmp_path, SIGNER, SECRET, store) as (a, b):
        taken = await _ring_of_two_with_a_holding(a, b)
        info = await a.catalog.queue("q")
        ids = [m.id for m in taken]
        st = a.queues.states.get(info.number)
        assert st is not None
        entries = [HandoverEntry(i, 30.0, 2, None, None, st.inflight[i].delivery) for i in ids]
        st.forget_all(ids)  # a no longer holds them: they travel through b
        b.view.replace([b.view.me])  # b alone: every lane is b's
        sender = HttpPeerHints(SIGNER)
        await sender.start()
        try:
            store.prefix = keys.message(info.number, 0)[:5]  # b's take-over read waits
            sender.released(b.view.me, "node-x", {"q": entries})
            flush = asyncio.create_task(sender.flush())
            await asyncio.wait_for(store.paused.wait(), 5)
            b.view.replace([a.view.me, b.view.me])  # meanwhile a's lanes go back to a
            store.resume.set()
            await flush
        finally:
            await sender.stop()
        await _until(lambda: a.queues.in_flight(info) == len(ids), "never passed on to a")
        assert b.queues.in_flight(info) == 0
        assert not {m.id for m in await _take_all(a)} & set(ids)


async def test_lanes_back_within_the_hold_are_held_again_by_the_member_that_gave_them(
    tmp_path: Path,
) -> None:
    """a gives b half its lanes with their entries, and within the hold the lanes are
    a's again (b gone as fast as it came, or two members joining one after the
    other): whether or not b took the entries in time to send them back, a holds
    them again, so none of its in-flight messages is served early."""
    async with hinted_pair(tmp_path, SIGNER, SECRET) as (a, b):
        b.queues.receiver.in_ring = False
        await a.catalog.create_queue("q")
        for _ in range(40):
            a.queues.writer.ids._left_in_lane = 0
            await a.queues.enqueue("q", [NewMessage(b"x")] * 5)
        taken = {m.id for m in await _take_all(a)}  # a alone: every lane
        b.view.replace([a.view.me, b.view.me])
        b.queues.receiver.in_ring = True
        a.view.replace([a.view.me, b.view.me])  # a releases b's half to b
        moved = {i for i in taken if (i >> LANE_SHIFT) not in a.view.my_slice}
        assert moved
        a.view.replace([a.view.me])  # and the lanes are a's again at once
        served = {m.id for m in await _take_all(a)}
        assert not served & taken


async def test_entries_given_back_go_to_their_lanes_owner_at_a_ring_change_that_gives_it_nothing(
    tmp_path: Path,
) -> None:
    """Entries a refused release gave back sit outside this node's slice until a ring
    change; one that gives their owner none of this node's lanes still sends them
    there (and, refused again by a member that is leaving, they come back again)."""
    async with hinted_pair(tmp_path, SIGNER, SECRET) as (a, b):
        await _ring_of_two_with_a_holding(a, b)
        info = await a.catalog.queue("q")
        fresh: list[int] = []
        for _ in range(40):
            a.queues.writer.ids._left_in_lane = 0
            fresh += await a.queues.enqueue("q", [NewMessage(b"y")] * 5)
        ids = [i for i in fresh if (i >> LANE_SHIFT) not in a.view.my_slice]  # b's lanes
        assert ids
        b.queues.drain()
        b.queues.hints.handover()  # b refuses entries from now on
        held = a.queues.in_flight(info)
        a.queues.handoff.take_back({"q": [HandoverEntry(i, 60.0, 1, None, None, 0) for i in ids]})
        assert a.queues.in_flight(info) == held + len(ids)
        first = Member("node-0", GONE.http_addr)  # sorts first: takes a's low lanes, none of b's
        a.view.replace([first, a.view.me, b.view.me])
        # What went to node-0 (no answer) and to b (refused) came back: nothing lost.
        await _until(lambda: a.queues.in_flight(info) == held + len(ids), "entries lost")
