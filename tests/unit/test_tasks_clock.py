"""Periodic tasks and waits driven by the injected clock; cancellation semantics."""

from __future__ import annotations

import asyncio

import pytest

from dynaq.clock import ManualClock
from dynaq.tasks import cancel_and_wait, every, wait_event


async def test_manual_clock_sleep_wakes_on_advance() -> None:
    clock = ManualClock()
    sleeper = asyncio.create_task(clock.sleep(10))
    await asyncio.sleep(0)
    clock.advance(9.9)
    await asyncio.sleep(0)
    assert not sleeper.done()
    clock.advance(0.1)
    await asyncio.wait_for(sleeper, 1)


async def test_every_runs_a_round_per_interval_and_survives_failures() -> None:
    clock = ManualClock()
    rounds = 0

    async def round_() -> None:
        nonlocal rounds
        rounds += 1
        if rounds == 1:
            raise RuntimeError("store briefly down")

    task = asyncio.create_task(every(5, round_, clock=clock, what="test"))
    for expected in (1, 2, 3):
        await asyncio.sleep(0)
        clock.advance(5)
        for _ in range(5):
            await asyncio.sleep(0)
        assert rounds == expected
    await cancel_and_wait(task)
    assert task.cancelled()


async def test_wait_event_returns_on_set_or_clock_timeout() -> None:
    clock = ManualClock()
    event = asyncio.Event()
    waiting = asyncio.create_task(wait_event(event, clock, 30))
    await asyncio.sleep(0)
    event.set()
    assert await asyncio.wait_for(waiting, 1) is True
    event.clear()
    waiting = asyncio.create_task(wait_event(event, clock, 30))
    for _ in range(5):  # let the waiter register its sleep with the clock
        await asyncio.sleep(0)
    clock.advance(30)
    assert await asyncio.wait_for(waiting, 1) is False


async def test_cancel_and_wait_does_not_swallow_the_callers_cancellation() -> None:
    stubborn_started = asyncio.Event()

    async def stubborn() -> None:
        stubborn_started.set()
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.05)  # unwinding takes a moment

    inner = asyncio.create_task(stubborn())
    await stubborn_started.wait()

    async def owner() -> None:
        await cancel_and_wait(inner)

    outer = asyncio.create_task(owner())
    await asyncio.sleep(0.01)  # owner is waiting for inner to unwind
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert inner.done()
