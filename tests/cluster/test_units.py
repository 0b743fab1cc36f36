"""Membership and writer slots in one process: kinship agents, a memory store, a manual clock."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from dynaq.clock import ManualClock
from dynaq.cluster import StaticMembership, WriterSlots
from dynaq.cluster.slots import slot_key
from dynaq.cluster.swim import SwimMembership, SwimSettings, derive_key, kinship_config
from dynaq.config import config_from_mapping
from dynaq.core.ids import MAX_WRITERS
from dynaq.core.membership import Member, MembershipView
from dynaq.errors import ClusterFull, InvalidInput, SlotLost
from dynaq.node import advertised_http, build_membership
from dynaq.storage.memory import MemoryStore
from dynaq.testing.process import free_port


def test_key_is_derived_from_the_secret() -> None:
    assert derive_key("s") == derive_key("s")
    assert len(derive_key("s")) == 32
    assert derive_key("s") != derive_key("t")


def test_config_is_checked_before_any_socket_opens() -> None:
    with pytest.raises(InvalidInput, match="preset"):
        kinship_config("a", "h:1", SwimSettings(bind="127.0.0.1:0", preset="fast"))
    with pytest.raises(InvalidInput, match=r"gossip\.key"):
        kinship_config("a", "h:1", SwimSettings(bind="0.0.0.0:7001"))
    cfg = kinship_config("a", "h:1", SwimSettings(bind="0.0.0.0:7001", secret="x", label="prod"))
    assert cfg.cluster == "prod" and cfg.meta == {"http": "h:1"}
    assert kinship_config("a", "h:1", SwimSettings(bind="127.0.0.1:0")).insecure_plaintext


def test_wiring_picks_the_membership_from_config() -> None:
    view = MembershipView(Member("n", "127.0.0.1:1"))
    single = config_from_mapping({})
    assert isinstance(build_membership(single, view), StaticMembership)
    seeded = config_from_mapping({"gossip": {"seeds": ["127.0.0.1:7001"], "key": "k"}})
    assert isinstance(build_membership(seeded, view), SwimMembership)
    assert advertised_http(single, 8081) == "127.0.0.1:8081"


async def test_static_membership_is_a_ring_of_one() -> None:
    view = MembershipView(Member("solo", "127.0.0.1:1"))
    m = StaticMembership(view)
    await m.start()
    assert m.live_names() == {"solo"}
    assert view.my_slice.lo == 0 and view.my_slice.hi == 1024
    await m.stop()


def _agent(name: str, port: int, seeds: list[int], secret: str = "s") -> SwimMembership:
    view = MembershipView(Member(name, f"127.0.0.1:{port + 1000}"))
    settings = SwimSettings(
        bind=f"127.0.0.1:{port}",
        seeds=[f"127.0.0.1:{p}" for p in seeds],
        secret=secret,
        preset="local",
    )
    return SwimMembership(view, settings)


async def _until(view: MembershipView, members: int, timeout_s: float = 10.0) -> None:
    """Wait until ``view`` holds ``members`` members (woken by its change listener)."""
    changed = asyncio.Event()
    view.on_change(changed.set)
    async with asyncio.timeout(timeout_s):
        while len(view.members) != members:
            await changed.wait()
            changed.clear()


@pytest.fixture
async def pair() -> AsyncIterator[tuple[SwimMembership, SwimMembership]]:
    pa, pb = free_port(), free_port()
    a, b = _agent("a", pa, [pb]), _agent("b", pb, [pa])
    await a.start()
    await b.start()
    try:
        yield a, b
    finally:
        await b.stop()
        await a.stop()


async def test_two_agents_see_each_other_with_http_addresses(
    pair: tuple[SwimMembership, SwimMembership],
) -> None:
    a, b = pair
    await _until(a.view, 2)
    await _until(b.view, 2)
    assert [m.name for m in a.view.members] == ["a", "b"]
    assert a.view.members[1] == b.view.me  # the HTTP address travelled as metadata
    assert a.view.my_slice.hi == b.view.my_slice.lo


async def test_leave_is_seen_at_once(pair: tuple[SwimMembership, SwimMembership]) -> None:
    a, b = pair
    await _until(a.view, 2)
    await b.stop()
    await _until(a.view, 1, 3.0)
    assert a.view.my_slice.width == 1024
    await b.stop()  # twice is fine


async def test_wrong_secret_cannot_join(pair: tuple[SwimMembership, SwimMembership]) -> None:
    a, _ = pair
    port = free_port()
    intruder = _agent("x", port, [int(a.gossip_addr.rsplit(":", 1)[1])], secret="wrong")
    await intruder.start()
    try:
        await asyncio.sleep(1.0)
        assert "x" not in a.live_names()
        assert intruder.live_names() == {"x"}
    finally:
        await intruder.stop()


# writer slots -------------------------------------------------------------------


def _slots(store: MemoryStore, name: str, clock: ManualClock, **kw: object) -> WriterSlots:
    return WriterSlots(store, name, clock, lease_s=60, refresh_s=10, **kw)  # type: ignore[arg-type]


async def test_nodes_get_distinct_slots_and_keep_them_across_restarts() -> None:
    store, clock = MemoryStore(), ManualClock()
    got = {}
    for name in ("n1", "n2", "n3"):
        s = _slots(store, name, clock)
        got[name] = await s.acquire()
        await s.stop()
    assert sorted(got.values()) == [0, 1, 2]
    again = _slots(store, "n2", clock)
    assert await again.acquire() == got["n2"]
    await again.stop()


async def test_slots_run_out_at_32_until_a_lease_lapses() -> None:
    store, clock = MemoryStore(), ManualClock()
    for i in range(MAX_WRITERS):
        s = _slots(store, f"n{i}", clock)
        await s.acquire()
        await s.stop()
    late = _slots(store, "late", clock, live=lambda: {"n0"})
    with pytest.raises(ClusterFull):
        await late.acquire()
    clock.advance(61)  # every lease lapsed; n0 is still live, so n1's slot is taken
    assert await late.acquire() == 1
    await late.stop()


async def test_refresh_notices_a_takeover() -> None:
    store, clock = MemoryStore(), ManualClock()
    lost: list[bool] = []
    s = _slots(store, "n1", clock, on_lost=lambda: lost.append(True))
    slot = await s.acquire()
    await s.refresh()
    await store.put(slot_key(slot), json.dumps({"name": "other", "heartbeat_ms": 1}).encode())
    with pytest.raises(SlotLost):
        await s.refresh()
    await s.stop()
