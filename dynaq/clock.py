"""Injectable time.

Visibility timeouts, long polls, partition ages, periodic tasks and metric
flushes read time through a :class:`Clock` so tests advance a
:class:`ManualClock` instead of sleeping. ``monotonic()`` and ``sleep()`` are
for intervals; ``wall_ms()`` is for message ids and timestamps that leave the
process; ``steady_wall_ms()`` is for spans of elapsed time that are stored
with epoch times (dedup windows), which a step of the wall clock (NTP, a VM
restore) must not end early or stretch while the process runs.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    """A source of time."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never goes backwards."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...

    def steady_wall_ms(self) -> int:
        """Milliseconds since the Unix epoch as the wall clock read when this clock was
        made, advanced by the monotonic clock since: never steps while the process
        runs (a wall-clock step shows only after a restart)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once ``monotonic()`` has moved on by ``seconds``."""
        ...


class SystemClock:
    """The real clock."""

    def __init__(self) -> None:
        self._anchor_wall_ns = time.time_ns()
        self._anchor_mono_ns = time.monotonic_ns()

    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def steady_wall_ms(self) -> int:
        elapsed = time.monotonic_ns() - self._anchor_mono_ns
        return (self._anchor_wall_ns + elapsed) // 1_000_000

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class ManualClock:
    """A clock that moves only when told to; for tests.

    :meth:`sleep` returns when :meth:`advance` moves the clock past its
    deadline, so periodic tasks and long polls run exactly when a test says.
    """

    def __init__(self, start_s: float = 1_000.0, wall_ms: int = 1_790_000_000_000) -> None:
        self._now = start_s
        self._wall_ms = wall_ms
        self._steady_wall_ms = wall_ms
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def monotonic(self) -> float:
        return self._now

    def wall_ms(self) -> int:
        return self._wall_ms

    def steady_wall_ms(self) -> int:
        return self._steady_wall_ms

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), fut))
        await fut

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds`` and wake the sleepers that are due."""
        self._now += seconds
        self._wall_ms += int(seconds * 1000)
        self._steady_wall_ms += int(seconds * 1000)
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():  # a cancelled sleeper is simply dropped
                fut.set_result(None)

    def step_wall(self, ms: int) -> None:
        """Step only the wall clock (an NTP step, a VM restore); ``ms`` may be negative.
        :meth:`steady_wall_ms` does not move (it would after a restart)."""
        self._wall_ms += ms
