"""Which nodes copy a stream, and when an append counts as acknowledged (no processes)."""

from __future__ import annotations

import asyncio

import pytest

from dynaq.clock import ManualClock
from dynaq.core.membership import Member, MembershipView
from dynaq.errors import ReplicationTimeout
from dynaq.streams.replicas import CopySizes, followers_of


def test_followers_are_the_next_live_members_after_the_authority() -> None:
    live = ["a", "b", "c", "d"]
    assert followers_of(live, "c", 3) == ["d", "a"]  # wraps around
    assert followers_of(live, "a", 1) == []
    assert followers_of(["a", "b"], "b", 3) == ["a"]  # fewer in a smaller ring
    assert followers_of(["a", "c"], "b", 3) == ["c", "a"]  # the authority need not be live


def _view(*names: str) -> MembershipView:
    view = MembershipView(Member(names[0], "127.0.0.1:1"))
    view.replace([Member(n, f"127.0.0.1:{i + 1}") for i, n in enumerate(names)])
    return view


async def test_a_quorum_append_waits_for_a_majority_of_the_copies() -> None:
    clock = ManualClock()
    copies = CopySizes(_view("a", "b", "c"), clock, replicas=3, quorum=True)
    assert copies.needed("s") == 2  # the authority and one follower of two
    waiting = asyncio.create_task(copies.wait("s", 10, timeout_s=5.0))
    await asyncio.sleep(0)
    copies.reported("s", "b", 9)
    await asyncio.sleep(0)
    assert not waiting.done()  # 9 entries are not the 10 the append ends at
    copies.reported("s", "c", 10)
    await asyncio.wait_for(waiting, 1.0)
    assert copies.sizes("s") == {"b": 9, "c": 10}


async def test_a_quorum_that_never_comes_is_a_retriable_timeout() -> None:
    clock = ManualClock()
    copies = CopySizes(_view("a", "b", "c"), clock, replicas=3, quorum=True)
    waiting = asyncio.create_task(copies.wait("s", 1, timeout_s=2.0))
    await asyncio.sleep(0)
    clock.advance(3.0)
    copies.reported("s", "b", 0)  # wakes the waiter, which finds its deadline passed
    with pytest.raises(ReplicationTimeout, match="1 of the 2 copies"):
        await asyncio.wait_for(waiting, 1.0)


async def test_leader_acks_and_a_lone_node_wait_for_nobody() -> None:
    clock = ManualClock()
    await CopySizes(_view("a", "b", "c"), clock, replicas=3, quorum=False).wait("s", 5, 0.01)
    await CopySizes(_view("a"), clock, replicas=3, quorum=True).wait("s", 5, 0.01)
