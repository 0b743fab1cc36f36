"""A persisted high-water mark for a writer slot's id clock: ids never repeat across restarts.

Message ids carry wall-clock milliseconds and message writes overwrite, so a
node restarted with its clock behind (an NTP step at boot, a VM restored from
a snapshot) would draw ids it drew before and silently replace stored,
unconsumed messages. This keeps, per writer slot, a record "no id of this
slot is newer than T" in the store:

* at start the generator's floor is the stored T: its ids continue after it;
* the record always runs ``ahead_s`` ahead of the newest id, refreshed every
  ``refresh_s``; the generator's ceiling is the last T written, so if refreshes
  fail the node answers writes with a retriable 503 instead of outrunning
  what a restart would know.

The cost is one small put every ``refresh_s``, off the hot path.
"""

from __future__ import annotations

import asyncio
import logging

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.ids import IdGenerator
from dynaq.errors import StorageError
from dynaq.storage.base import Store
from dynaq.tasks import cancel_and_wait, every

log = logging.getLogger(__name__)


class IdFloor:
    """Keeps one writer slot's high-water mark in the store and the generator inside it."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        ids: IdGenerator,
        *,
        ahead_s: float = 3.0,
        refresh_s: float = 1.0,
    ) -> None:
        self._store = store
        self._clock = clock
        self._ids = ids
        self._ahead_ms = int(ahead_s * 1000)
        self._refresh_s = refresh_s
        self._key = keys.id_high_water(ids.writer)
        self._task: asyncio.Task[None] | None = None
        # The periodic refresh and a writer's (see Writer.refresh_ids) never
        # interleave: the ceiling set last is then the mark stored last.
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Read the slot's mark, continue after it, and persist a new one before any id is drawn."""
        item = await self._store.get(self._key)
        floor_ms = 0
        if item is not None:
            try:
                floor_ms = int(item.value)
            except ValueError as exc:
                raise StorageError(f"corrupt id high-water mark: {item.value!r}") from exc
        behind_ms = floor_ms - self._clock.wall_ms()
        if behind_ms > self._ahead_ms:
            # The mark is kept ahead_s past the newest id: a restart within that lead
            # (a kill -9 and a supervisor's restart) finds it ahead with nothing wrong.
            log.warning(
                "clock is behind this writer slot's newest id: ids continue after it",
                extra={"behind_ms": behind_ms, "slot": self._ids.writer},
            )
        self._ids.set_bounds(floor_ms + 1, None)
        await self.refresh()
        self._task = asyncio.create_task(
            every(self._refresh_s, self.refresh, clock=self._clock, what="id high-water refresh"),
            name="id-high-water",
        )

    async def refresh(self) -> None:
        """Persist a mark ``ahead_s`` past the newest id, then let ids run up to it."""
        async with self._lock:
            mark = self._ids.high_water_ms() + self._ahead_ms
            await self._store.put(self._key, str(mark).encode())
            self._ids.set_bounds(0, mark)

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
