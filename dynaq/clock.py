"""Injectable time.

Visibility timeouts, partition ages and metric flushes read time through a
:class:`Clock` so tests advance a :class:`ManualClock` instead of sleeping.
``monotonic()`` is for intervals; ``wall_ms()`` is for message ids and
timestamps that leave the process.
"""

from __future__ import annotations

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


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to; for tests."""

    def __init__(self, start_s: float = 1_000.0, wall_ms: int = 1_790_000_000_000) -> None:
        self._now = start_s
        self._wall_ms = wall_ms

    def monotonic(self) -> float:
        return self._now

    def wall_ms(self) -> int:
        return self._wall_ms

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds``."""
        self._now += seconds
        self._wall_ms += int(seconds * 1000)
