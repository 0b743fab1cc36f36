"""Listeners of a stream: where one starts, and the loop that replays and then follows.

A listener reads only what is durable, from its own cursor, on the service's
reader threads: a slow one falls behind without holding up the publisher or
the other listeners.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field

from dynaq.clock import Clock
from dynaq.errors import InvalidInput
from dynaq.streams.listen import Chunk, Cursor
from dynaq.streams.stream import Stream
from dynaq.tasks import wait_event


@dataclass
class Start:
    """Where a listener starts: at most one of these is set (none: the beginning)."""

    i: int | None = None
    tail: int | None = None
    since: int | None = None
    recent_ms: int | None = None


@dataclass
class Subscription:
    """One listener: its id, cursor, and the event that wakes it."""

    id: str
    stream: Stream
    cursor: Cursor
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    stopped: bool = False

    def stop(self) -> None:
        self.stopped = True
        self.wake.set()


def start_at(stream: Stream, start: Start, now_ms: int) -> tuple[int, int]:
    """The first index a listener reads and the least order key it passes on.

    A start by order key (``since``, or ``recent`` ms back from ``now_ms``) finds
    its segment from the segment names alone (and the active file's memory).
    """
    segments, size = stream.snapshot()
    first_kept = segments[0].first_index
    index, min_order = first_kept, 0
    since = start.since
    if start.recent_ms is not None:
        if stream.type.order_key is None:
            raise InvalidInput("recent needs a stream with an order key (this one has none)")
        since = max(0, now_ms - start.recent_ms)
    if start.i is not None:
        index = start.i
    elif start.tail is not None:
        index = max(first_kept, size - start.tail)
    elif since is not None:
        if stream.type.order_key is None:
            index = since  # the order key is the index
        else:
            min_order, index = since, size
            for seg in segments:
                if seg.count and seg.last_order >= since:
                    index = seg.first_index
                    break
    return index, min_order


async def follow(
    sub: Subscription,
    readers: Executor,
    clock: Clock,
    nowait: bool,
    alive: Callable[[], bool],
    idle_check_s: float,
) -> AsyncGenerator[Chunk, None]:
    """Replay, then follow live until a stop condition, ``nowait`` catching up,
    termination, deletion, or ``alive()`` turning false (the listener's connection
    closed: checked every ``idle_check_s`` while caught up, so an idle stream does
    not keep a gone listener's files open)."""
    loop = asyncio.get_running_loop()
    while not sub.stopped:
        sub.wake.clear()
        chunk = await loop.run_in_executor(readers, sub.cursor.read)
        if chunk.data or chunk.done:
            yield chunk
        if chunk.done:
            return
        if chunk.caught_up:
            if nowait:
                return
            while not await wait_event(sub.wake, clock, idle_check_s):
                if not alive():
                    return
