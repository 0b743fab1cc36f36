"""Background queue tasks with readable progress: redrive (dead letters back) and purge.

A task runs on the node that accepted it and writes its progress record
(``t/`` + task id, JSON) after every page (a purge: at most every second; a
purge resumed after a crash may count fewer than it removed), so any node can answer
``GET /v2/tasks/{task}``. Guarantees:

* **Redrive** moves each message of a (dead-letter) queue to ``to_queue``, or
  back to the queue it was dead-lettered from, one page per store batch: a
  message is in exactly one of the two queues whatever fails. At most
  ``max_per_s`` messages a second. A message with nowhere to go (no origin and
  no ``to_queue``, or its queue deleted) is skipped and stays. Moved messages
  are new messages in their target (new ids, receive count 0).
* **Purge** deletes every message (delayed ones too) whose id was drawn up to the
  millisecond the purge started (ids carry their writer's clock; a lane whose
  hybrid clock had run ahead of the wall clock is cut above its greatest id at
  the start instead): messages enqueued after it are kept,
  except one drawn through a node whose clock is behind the purging node's
  by more than the time since the purge started.
* A task cut short by its node stopping is resumed where its record says when
  that node starts again (both are idempotent); a task whose node never comes
  back reads ``interrupted`` once its record is a minute stale.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.ids import LANES, enqueued_ms, first_id_at, lane_start
from dynaq.errors import DynaqError, InvalidInput, NotFound, StorageUnavailable
from dynaq.services.catalog import Catalog, QueueInfo
from dynaq.services.queues.dead_letters import DeadLetters
from dynaq.storage.base import Delete, Store
from dynaq.tasks import cancel_and_wait

log = logging.getLogger(__name__)

MAX_RATE_PER_S = 10_000
"""Fastest redrive a task may ask for, in messages a second."""
DEFAULT_RATE_PER_S = 500
_STALE_MS = 60_000
_PURGE_CHUNK = 1000
_PURGE_LANES_AT_ONCE = 32
_WINDOW_TIMEOUT_S = 20.0
_WINDOW_TRIES = 3
_PROGRESS_EVERY_MS = 1000


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """A task's progress as stored and shown."""

    id: str
    kind: str
    queue: str
    state: str
    moved: int
    skipped: int
    node: str
    started_at_ms: int
    updated_at_ms: int
    to_queue: str | None = None
    max_per_s: int = 0
    cursor: int = 0
    """Redrive: the next id to look at. Purge: the next lane."""
    error: str | None = None
    ahead: dict[str, int] | None = None
    """Purge: lanes whose hybrid clock had run past the start, with the first id to keep."""

    def public(self, now_ms: int) -> dict[str, Any]:
        out = asdict(self)
        del out["cursor"]
        del out["ahead"]
        if out["error"] is None:
            del out["error"]
        if self.state == "running" and now_ms - self.updated_at_ms > _STALE_MS:
            out["state"] = "interrupted"
        return out


class QueueTasks:
    """Starts, runs, resumes and reports redrive and purge tasks on this node."""

    def __init__(
        self,
        store: Store,
        catalog: Catalog,
        dead_letters: DeadLetters,
        note_purged: Callable[[QueueInfo, int], None],
        clock: Clock,
        node: Callable[[], str],
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._dead_letters = dead_letters
        self._note_purged = note_purged
        self._clock = clock
        self._node_name = node
        self._running: dict[str, asyncio.Task[None]] = {}

    async def start(self) -> None:
        """Resume this node's tasks left running by its last stop or crash."""
        for _key, raw in await self._store.scan(keys.TASK, keys.task_end(), 10_000):
            rec = _decode(raw)
            if (
                rec.state == "running"
                and rec.node == self._node_name()
                and rec.id not in self._running
            ):
                self._spawn(rec)

    async def stop(self) -> None:
        """Cancel and await every running task (their records say where to resume)."""
        tasks = list(self._running.values())
        self._running.clear()
        for t in tasks:
            await cancel_and_wait(t)

    async def get(self, task_id: str) -> dict[str, Any]:
        item = await self._store.get(keys.task(task_id))
        if item is None:
            raise NotFound(f"task {task_id!r} not found")
        return _decode(item.value).public(self._clock.wall_ms())

    async def list_for(self, queue: str, kind: str, limit: int = 10) -> list[dict[str, Any]]:
        """The latest ``limit`` tasks of ``kind`` on ``queue``, newest first."""
        now = self._clock.wall_ms()
        found = [
            rec
            for rec in map(
                _decode,
                (raw for _, raw in await self._store.scan(keys.TASK, keys.task_end(), 10_000)),
            )
            if rec.queue == queue and rec.kind == kind
        ]
        found.sort(key=lambda r: r.started_at_ms, reverse=True)
        return [r.public(now) for r in found[:limit]]

    async def start_redrive(
        self, info: QueueInfo, to_queue: str | None, max_per_s: int
    ) -> dict[str, Any]:
        """Start moving ``info``'s messages back (see the module docstring)."""
        if not 1 <= max_per_s <= MAX_RATE_PER_S:
            raise InvalidInput(f"max_per_s must be an integer in 1..{MAX_RATE_PER_S}")
        if to_queue is not None:
            if to_queue == info.name:
                raise InvalidInput("to_queue must be another queue")
            await self._catalog.queue(to_queue)
        return await self._create("redrive", info, to_queue, max_per_s)

    async def start_purge(self, info: QueueInfo) -> dict[str, Any]:
        """Start deleting every message of ``info`` enqueued before now."""
        return await self._create("purge", info, None, 0)

    async def _lanes_ahead(self, info: QueueInfo, started_ms: int) -> dict[str, int]:
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

    async def _create(
        self, kind: str, info: QueueInfo, to_queue: str | None, max_per_s: int
    ) -> dict[str, Any]:
        now = self._clock.wall_ms()
        rec = TaskRecord(
            secrets.token_hex(16), kind, info.name, "running", 0, 0, self._node_name(), now, now,
            to_queue, max_per_s,
        )  # fmt: skip
        if kind == "purge":
            rec = replace(rec, ahead=await self._lanes_ahead(info, now))
        await self._save(rec)
        self._spawn(rec)
        return rec.public(now)

    def _spawn(self, rec: TaskRecord) -> None:
        self._running[rec.id] = asyncio.create_task(self._run(rec), name=f"task-{rec.id}")

    async def _save(self, rec: TaskRecord) -> None:
        await self._store.put(keys.task(rec.id), json.dumps(asdict(rec)).encode())

    async def _run(self, rec: TaskRecord) -> None:
        log.info("queue task running", extra={"task": rec.id, "kind": rec.kind, "queue": rec.queue})
        try:
            info = await self._catalog.queue(rec.queue)
            if rec.kind == "redrive":
                rec = await self._redrive(info, rec)
            else:
                rec = await self._purge(info, rec)
            await self._save(replace(rec, state="done", updated_at_ms=self._clock.wall_ms()))
            log.info(
                "queue task done", extra={"task": rec.id, "kind": rec.kind, "moved": rec.moved}
            )
        except DynaqError as exc:
            log.warning("queue task failed", extra={"task": rec.id, "error": str(exc)})
            rec = replace(
                rec, state="failed", error=exc.message, updated_at_ms=self._clock.wall_ms()
            )
            try:
                await self._save(rec)
            except DynaqError:
                log.warning("could not record the task's failure", extra={"task": rec.id})
        finally:
            self._running.pop(rec.id, None)

    async def _redrive(self, info: QueueInfo, rec: TaskRecord) -> TaskRecord:
        page = max(1, min(100, rec.max_per_s))
        while True:
            began = self._clock.monotonic()
            start, end = keys.message(info.number, rec.cursor), keys.queue_messages(info.number)[1]
            rows = await self._store.scan(start, end, page)
            if not rows:
                return rec
            moved, skipped = await self._dead_letters.redrive_page(info, rows, rec.to_queue)
            rec = replace(
                rec,
                moved=rec.moved + moved,
                skipped=rec.skipped + skipped,
                cursor=keys.message_id(rows[-1][0]) + 1,
                updated_at_ms=self._clock.wall_ms(),
            )
            await self._save(rec)
            # Bounded rate: a page of n messages takes at least n / max_per_s seconds.
            left = len(rows) / rec.max_per_s - (self._clock.monotonic() - began)
            if left > 0:
                await self._clock.sleep(left)

    async def _purge(self, info: QueueInfo, rec: TaskRecord) -> TaskRecord:
        # Delayed messages first: one that falls due meanwhile moves into its lane
        # (keeping its id), which the lane pass after this one still reaches.
        if rec.cursor == 0:
            for attempt in range(1, _WINDOW_TRIES + 1):
                try:  # idempotent: a pass that did not answer is run again
                    async with asyncio.timeout(_WINDOW_TIMEOUT_S):
                        rec = await self._purge_delayed(info, rec)
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
            removed = await self._purge_window(info, rec, lanes)
            if removed:
                self._note_purged(info, removed)
            now = self._clock.wall_ms()
            rec = replace(rec, moved=rec.moved + removed, cursor=lanes[-1] + 1, updated_at_ms=now)
            # Progress at most every second (a record write is a Paxos round on
            # Cassandra); the caller saves the last one. A resumed purge redoes at
            # most that second's windows, and deleting is idempotent.
            if now - saved_ms >= _PROGRESS_EVERY_MS and rec.cursor < LANES:
                await self._save(rec)
                saved_ms = now
        return rec

    async def _purge_window(self, info: QueueInfo, rec: TaskRecord, lanes: range) -> int:
        """Purge ``lanes`` at once; the lanes whose store calls have not answered
        within ``_WINDOW_TIMEOUT_S`` are tried again (deleting is idempotent), so one
        lost reply cannot hold the task for ever. A lane that answered keeps its
        count: a retry finds its messages gone, and must not count them as none."""
        removed: dict[int, int] = {}

        async def purge(lane: int) -> None:
            removed[lane] = await self._purge_lane(info, rec, lane)

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

    async def _purge_lane(self, info: QueueInfo, rec: TaskRecord, lane: int) -> int:
        cut = first_id_at(lane, rec.started_at_ms + 1)
        end = keys.message(info.number, max(cut, (rec.ahead or {}).get(str(lane), cut)))
        return await self._store.delete_range(
            keys.message(info.number, lane_start(lane)), end, _PURGE_CHUNK
        )

    async def _purge_delayed(self, info: QueueInfo, rec: TaskRecord) -> TaskRecord:
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


def _decode(raw: bytes) -> TaskRecord:
    return TaskRecord(**json.loads(raw))
