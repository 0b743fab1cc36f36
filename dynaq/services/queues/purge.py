"""The purge pass of a queue task (see :mod:`dynaq.services.queues.tasks` for what
a purge guarantees): delayed messages first, then the lanes, a window at a time.

Every step is idempotent (deletes of a range cut at the purge's start), so a
window whose store calls do not answer in time is run again, and a purge
resumed after a crash redoes at most the second of windows since its last
saved progress.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.ids import LANES, enqueued_ms, first_id_at, lane_of, lane_start
from dynaq.errors import StorageUnavailable
from dynaq.services.catalog import QueueInfo
from dynaq.services.queues.task_record import TaskRecord
from dynaq.storage.base import Delete, Store

log = logging.getLogger(__name__)

_PURGE_CHUNK = 1000
_PURGE_LANES_AT_ONCE = 32
_WINDOW_TIMEOUT_S = 20.0
_WINDOW_TRIES = 3
_PROGRESS_EVERY_MS = 1000


NotePurged = Callable[[QueueInfo, int, Callable[[int], bool]], None]
"""Told after each window: the queue, how many messages went, and which ids the
window's range held (the owner forgets those it had in flight)."""


def _lane_end(rec: TaskRecord, lane: int) -> int:
    """The first id of ``lane`` the purge keeps."""
    cut = first_id_at(lane, rec.started_at_ms + 1)
    return max(cut, (rec.ahead or {}).get(str(lane), cut))


def _purged_by(rec: TaskRecord, lanes: range) -> Callable[[int], bool]:
    ends = {lane: _lane_end(rec, lane) for lane in lanes}
    return lambda mid: (end := ends.get(lane_of(mid))) is not None and mid < end


class Purger:
    """Runs purges of queues on one store, saving progress through ``save``."""

    def __init__(
        self,
        store: Store,
        note_purged: NotePurged,
        clock: Clock,
        save: Callable[[TaskRecord], Awaitable[None]],
    ) -> None:
        self._store = store
        self._note_purged = note_purged
        self._clock = clock
        self._save = save

    async def lanes_ahead(self, info: QueueInfo, started_ms: int) -> dict[str, int]:
        """Lanes holding ids drawn at the start but stamped after it, with the id past
        each lane's greatest such id.

        An id's time is its lane's hybrid clock, which runs ahead of the wall clock
        under bursts or when a group's message is drawn above the lane's last key;
        such a message was there before the purge and must go. Only the range above
        the wall-clock cut is read, which is empty in almost every lane.
        """
        gate = asyncio.Semaphore(32)

        async def probe(lane: int) -> tuple[int, bytes | None]:
            async with gate:  # lane_start(LANES) is 2**63: still a valid unsigned key
                last = await self._store.last_key(
                    keys.message(info.number, first_id_at(lane, started_ms + 1)),
                    keys.message(info.number, lane_start(lane + 1)),
                )
            return lane, last

        found = await asyncio.gather(*(probe(lane) for lane in range(LANES)))
        return {str(lane): keys.message_id(last) + 1 for lane, last in found if last is not None}

    async def run(self, info: QueueInfo, rec: TaskRecord) -> TaskRecord:
        """Purge ``info`` from where ``rec`` says; return the last progress (unsaved)."""
        # Delayed messages first: one that falls due meanwhile moves into its lane
        # (keeping its id), which the lane pass after this one still reaches.
        if rec.cursor == 0:
            for attempt in range(1, _WINDOW_TRIES + 1):
                try:  # idempotent: a pass that did not answer is run again
                    async with asyncio.timeout(_WINDOW_TIMEOUT_S):
                        rec = await self._delayed(info, rec)
                    break
                except TimeoutError:
                    log.warning(
                        "purge of delayed messages timed out; trying it again",
                        extra={"task": rec.id, "attempt": attempt},
                    )
            else:
                raise StorageUnavailable(f"purge of {info.name!r}: delayed messages did not answer")
        saved_ms = self._clock.wall_ms()
        for first in range(rec.cursor, LANES, _PURGE_LANES_AT_ONCE):
            lanes = range(first, min(first + _PURGE_LANES_AT_ONCE, LANES))
            # Lanes are independent ranges (partitions on Cassandra): a window of
            # them at once makes a purge of an empty queue take 32 round trips, not 1024.
            removed = await self._window(info, rec, lanes)
            if removed:
                self._note_purged(info, removed, _purged_by(rec, lanes))
            now = self._clock.wall_ms()
            rec = replace(rec, moved=rec.moved + removed, cursor=lanes[-1] + 1, updated_at_ms=now)
            # Progress at most every second (a record write is a Paxos round on
            # Cassandra); the caller saves the last one. A resumed purge redoes at
            # most that second's windows, and deleting is idempotent.
            if now - saved_ms >= _PROGRESS_EVERY_MS and rec.cursor < LANES:
                await self._save(rec)
                saved_ms = now
        return rec

    async def _window(self, info: QueueInfo, rec: TaskRecord, lanes: range) -> int:
        """Purge ``lanes`` at once; the lanes whose store calls have not answered
        within ``_WINDOW_TIMEOUT_S`` are tried again (deleting is idempotent), so one
        lost reply cannot hold the task for ever. A lane that answered keeps its
        count: a retry finds its messages gone, and must not count them as none."""
        removed: dict[int, int] = {}

        async def purge(lane: int) -> None:
            removed[lane] = await self._lane(info, rec, lane)

        for attempt in range(1, _WINDOW_TRIES + 1):
            left = [lane for lane in lanes if lane not in removed]
            try:
                async with asyncio.timeout(_WINDOW_TIMEOUT_S):
                    await asyncio.gather(*(purge(lane) for lane in left))
                return sum(removed.values())
            except TimeoutError:
                log.warning(
                    "purge window timed out; trying its lanes that did not answer again",
                    extra={"task": rec.id, "lanes": f"{lanes.start}-{lanes.stop - 1}",
                           "unanswered": len(lanes) - len(removed), "attempt": attempt},
                )  # fmt: skip
        raise StorageUnavailable(
            f"purge of {info.name!r}: lanes {lanes.start}-{lanes.stop - 1} did not answer "
            f"in {_WINDOW_TRIES} tries of {_WINDOW_TIMEOUT_S:g} s"
        )

    async def _lane(self, info: QueueInfo, rec: TaskRecord, lane: int) -> int:
        end = keys.message(info.number, _lane_end(rec, lane))
        return await self._store.delete_range(
            keys.message(info.number, lane_start(lane)), end, _PURGE_CHUNK
        )

    async def _delayed(self, info: QueueInfo, rec: TaskRecord) -> TaskRecord:
        """Drop the queue's messages still waiting for their delay: the whole waiting
        range, which holds at most the last 15 minutes of delayed enqueues."""
        start, end = keys.DELAYED, keys.DELAYED + b"\xff"
        while True:
            rows = await self._store.scan(start, end, _PURGE_CHUNK)
            doomed = [
                Delete(k)
                for k, _ in rows
                if keys.delayed_fields(k)[1] == info.number
                and enqueued_ms(keys.delayed_fields(k)[2]) <= rec.started_at_ms
            ]
            if doomed:
                await self._store.write_batch(doomed)
                rec = replace(
                    rec, moved=rec.moved + len(doomed), updated_at_ms=self._clock.wall_ms()
                )
                await self._save(rec)
            if len(rows) < _PURGE_CHUNK:
                return rec
            start = rows[-1][0] + b"\x00"
