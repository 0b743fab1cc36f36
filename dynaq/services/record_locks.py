"""One node's read-modify-write cycles on a config record, one at a time.

Concurrent cycles of one node on one record (two PATCHes of a queue, two
subscriptions to a topic, two queues drawing numbers from the one counter) would
only make each other's conditional writes fail and retry; run one at a time, a
conflict means another node wrote meanwhile. Locks exist only while held or
awaited, so the map stays as small as the work in progress.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field


@dataclass
class _Held:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class RecordLocks:
    """An asyncio lock per record key, dropped once nobody holds or awaits it."""

    def __init__(self) -> None:
        self._held: dict[bytes, _Held] = {}

    @contextlib.asynccontextmanager
    async def serial(self, key: bytes) -> AsyncIterator[None]:
        """Hold ``key``'s lock for the block."""
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = _Held()
        held.users += 1
        try:
            async with held.lock:
                yield
        finally:
            held.users -= 1
            if held.users == 0:
                del self._held[key]

    def __len__(self) -> int:
        return len(self._held)
