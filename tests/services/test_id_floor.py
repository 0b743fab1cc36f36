"""Ids never repeat across a restart with the clock stepped back (they would overwrite)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dynaq.clock import ManualClock
from dynaq.core import keys
from dynaq.core.ids import IdGenerator, enqueued_ms, lane_of
from dynaq.core.messages import NewMessage
from dynaq.errors import IdClockStalled
from dynaq.node import Node
from dynaq.services.id_floor import IdFloor
from dynaq.storage.memory import MemoryStore
from tests.fixtures.nodes import node_config


async def test_restart_with_clock_stepped_back_keeps_every_message(tmp_path: Path) -> None:
    clock = ManualClock()
    node = Node(node_config(tmp_path), clock=clock)
    await node.start()
    await node.catalog.create_queue("q")
    first = await node.queues.enqueue("q", [NewMessage(b"%d" % i) for i in range(50)])
    await node.stop()

    clock.step_wall(-5)  # the node comes back with its clock a little behind
    node = Node(node_config(tmp_path), clock=clock)
    await node.start()
    try:
        ids = node.queues.writer.ids
        ids._lane, ids._left_in_lane = lane_of(first[0]), 10_000  # on the same lane
        second: list[int] = []
        for _ in range(2):  # 2000 ids: they reach the milliseconds the first run used
            second += await node.queues.enqueue("q", [NewMessage(b"n") for _ in range(1000)])
        assert not set(first) & set(second)
        got = []
        while batch := await node.queues.receive("q", 1000):
            got += batch
        assert len(got) == 2050
    finally:
        await node.stop()


async def test_ids_wait_at_the_persisted_mark_until_it_is_refreshed() -> None:
    clock = ManualClock()
    store = MemoryStore()
    ids = IdGenerator(clock)
    floor = IdFloor(store, clock, ids, ahead_s=10, refresh_s=2)
    await floor.start()
    try:
        ids.allocate(0, 1)
        mark_ms = int((await store.get(keys.id_high_water(0))).value)  # type: ignore[union-attr]
        clock.step_wall(60_000)  # a step forward past the mark, before the refresh ran
        (at_mark,) = ids.allocate(0, 1)
        assert enqueued_ms(at_mark) <= mark_ms  # id time waits at the mark
        with pytest.raises(IdClockStalled) as exc:
            ids.allocate(0, 256)  # the mark's millisecond is used up
        assert exc.value.status == 503 and exc.value.retriable
        await floor.refresh()
        (later,) = ids.allocate(0, 1)
        assert enqueued_ms(later) > mark_ms
    finally:
        await floor.stop()


async def test_only_a_clock_behind_the_marks_own_lead_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The mark runs ahead_s past the newest id: a prompt restart (a kill -9, then the
    supervisor's restart 1.5 s later) finds it ahead with nothing wrong; a clock
    stepped back further than that lead is warned about."""
    clock, store = ManualClock(), MemoryStore()
    for back_ms, warned in ((0, False), (-1_500, False), (9_000, True)):
        first = IdFloor(store, clock, IdGenerator(clock), ahead_s=3, refresh_s=60)
        await first.start()
        await first.stop()
        clock.step_wall(-back_ms)
        caplog.clear()
        again = IdFloor(store, clock, IdGenerator(clock), ahead_s=3, refresh_s=60)
        with caplog.at_level("WARNING", logger="dynaq.services.id_floor"):
            await again.start()
        await again.stop()
        said = any("clock is behind" in r.getMessage() for r in caplog.records)
        assert said is warned, (back_ms, caplog.records)
        clock.step_wall(60_000)  # the next round starts past every mark so far
