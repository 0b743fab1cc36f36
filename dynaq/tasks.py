"""Helpers for the background tasks every service owns.

Every periodic loop in dynaq is :func:`every`, driven by the injected
:class:`~dynaq.clock.Clock` (tests advance a ``ManualClock``), held on an
attribute by its owner and stopped with :func:`cancel_and_wait`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from dynaq.clock import Clock

log = logging.getLogger(__name__)


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (if any) and wait until it has finished unwinding.

    Awaiting after ``cancel()`` matters: a task's ``finally`` blocks (flushes,
    releases) run before the owner closes what the task uses. The task's own
    cancellation is absorbed, but if the *caller* is being cancelled while it
    waits, that cancellation propagates: it is not ours to swallow.
    """
    if task is None:
        return
    task.cancel()
    await wait_finished(task)


async def wait_finished(task: asyncio.Task[Any]) -> None:
    """Wait until ``task`` has ended; what it raises propagates, except its own
    cancellation. The caller's cancellation always propagates."""
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise


async def cancel_all(tasks: Iterable[asyncio.Task[Any] | None]) -> None:
    """Cancel every task and wait until all have unwound.

    What a task raises while unwinding (a driver complaining about the call it
    was interrupted in) is logged, not raised: the owner is tearing down and
    has nothing better to do with it. The caller's own cancellation propagates.
    """
    live = [t for t in tasks if t is not None]
    for t in live:
        t.cancel()
    for t, result in zip(live, await asyncio.gather(*live, return_exceptions=True), strict=True):
        if isinstance(result, Exception):
            log.debug("task %s raised while cancelled: %r", t.get_name(), result)


async def every(
    interval_s: float,
    round_: Callable[[], Awaitable[Any]],
    *,
    clock: Clock,
    what: str,
    first_after_s: float | None = None,
) -> None:
    """Run ``round_`` every ``interval_s`` seconds of ``clock`` until cancelled, the
    first time after ``first_after_s`` (default: one interval).

    A round that raises is logged and the loop goes on at the next interval:
    periodic upkeep must survive a store that is briefly unavailable.
    """
    wait_s = interval_s if first_after_s is None else first_after_s
    while True:
        await clock.sleep(wait_s)
        wait_s = interval_s
        try:
            await round_()
        except Exception:
            log.exception("%s failed; retrying next round", what)


async def wait_event(event: asyncio.Event, clock: Clock, timeout_s: float) -> bool:
    """Wait until ``event`` is set or ``timeout_s`` of ``clock`` has passed; return
    whether it is set."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    sleeper = asyncio.ensure_future(clock.sleep(timeout_s))
    try:
        await asyncio.wait((waiter, sleeper), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (waiter, sleeper):
            t.cancel()
        await asyncio.gather(waiter, sleeper, return_exceptions=True)
    return event.is_set()
