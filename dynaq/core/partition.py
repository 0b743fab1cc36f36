"""One partition: a lane range of one queue on this node, with its scan cursor
and lock (see :mod:`dynaq.core.partitions`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from dynaq.core.keyspace import LaneRange


@dataclass(eq=False, slots=True)
class Partition:
    """A lane range of one queue on this node."""

    lanes: LaneRange
    created_at: float
    last_used: float = float("-inf")
    locked_until: float = float("-inf")
    cursor: int | None = None
    rewind: int | None = None
    wakes: int = 0
    idle: bool = False
    idle_since: float = 0.0
    last_pass_count: int = 0
    pass_count: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def due(self, now: float, idle_rescan_s: float) -> bool:
        """Whether a scan may find something."""
        return not self.idle or now - self.idle_since >= idle_rescan_s

    def wake(self) -> None:
        self.idle = False
        self.wakes += 1

    def rewind_to(self, message_id: int) -> None:
        """Make the next scan start no later than ``message_id`` (a group's next message)."""
        self.wake()
        if self.rewind is None or message_id < self.rewind:
            self.rewind = message_id

    def take_start(self) -> int:
        """Where the next scan begins: the cursor, or earlier if a rewind was asked for."""
        start = self.lanes.bottom_id if self.cursor is None else self.cursor
        if self.rewind is not None:
            start = max(self.lanes.bottom_id, min(start, self.rewind))
            self.rewind = None
        return start
