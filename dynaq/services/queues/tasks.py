"""Background queue tasks with readable progress: redrive (dead letters back) and purge.

A task runs on the node that accepted it and writes its progress record
(``t/`` + task id, JSON) with every page (a redrive on the embedded store: in
the page's own store batch, so its counts are exact through any crash; on
Cassandra and Riak right after the batch, so a crash between the two leaves
that page uncounted; a purge: at most every second, and one resumed after a
crash may count fewer than it removed), so any node can answer
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
* **Cancel** (a redrive only): the task stops before its next page, within a
  page of the request (at once on the node running it); what it moved stays
  moved, and it ends ``cancelled``. A task whose node is gone (its record
  stale) is marked ``cancelled`` by the node that got the request.
* A task cut short by its node stopping is resumed where its record says when
  that node starts again (both are idempotent), however many task records the
  store holds (the start walks them all, page by page); a task whose node never
  comes back reads ``interrupted`` once its record is a minute stale.
* **Listing** (:meth:`QueueTasks.list_for`, SQS's ListMessageMoveTasks and the
  ``PurgeQueue`` interval) reads only the queue's own index entries of that
  kind, newest first (:mod:`.task_index`). During a rolling upgrade, a task
  started by a node of an earlier release is listed once a node of this
  release has started after it (starts index unindexed records).
* **Retention**: a finished task's record (and its index entry and cancel
  request) is deleted ``queues.task_retention_s`` (14 days) after it ended, by
  every node's upkeep (:mod:`.task_retention`); a running one's never. Deleting
  a queue leaves its tasks' records until then (what they did stays readable by
  id), listed under the queue's name, also for a queue re-created under it.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.errors import (
    DynaqError,
    InvalidInput,
    NotFound,
    QueueNotFound,
    TaskNotRunning,
)
from dynaq.services.catalog import Catalog, QueueInfo
from dynaq.services.queues.crash_point import CrashPoint
from dynaq.services.queues.dead_letters import DeadLetters
from dynaq.services.queues.purge import NotePurged, Purger
from dynaq.services.queues.task_index import (
    add_missing_entries,
    create_record,
    latest,
    record_pages,
)
from dynaq.services.queues.task_record import STALE_MS, TaskRecord, decode_task
from dynaq.services.queues.task_retention import TaskRetention
from dynaq.storage.base import Put, Store
from dynaq.tasks import cancel_and_wait

log = logging.getLogger(__name__)

MAX_RATE_PER_S = 10_000
"""Fastest redrive a task may ask for, in messages a second."""
DEFAULT_RATE_PER_S = 500


class QueueTasks:
    """Starts, runs, resumes and reports redrive and purge tasks on this node."""

    def __init__(
        self,
        store: Store,
        catalog: Catalog,
        dead_letters: DeadLetters,
        note_purged: NotePurged,
        clock: Clock,
        node: Callable[[], str],
        retention: TaskRetention,
    ) -> None:
        self._store = store
        self._retention = retention
        self._catalog = catalog
        self._dead_letters = dead_letters
        self._purger = Purger(store, note_purged, clock, self._save)
        self._clock = clock
        self._node_name = node
        self._running: dict[str, asyncio.Task[None]] = {}
        self._cancelled: dict[str, asyncio.Event] = {}
        """Set when a running task of this node is asked to stop (wakes its rate limit)."""
        self.crash = CrashPoint(None)
        """A test hook: SIGKILL after a redrive page's batch (see :mod:`.crash_point`)."""

    async def start(self) -> None:
        """Resume this node's tasks left running by its last stop or crash, and index
        the task records that have no index entry (see :mod:`.task_index`): one walk
        over every task record, page by page, however many there are."""
        me, now = self._node_name(), self._clock.wall_ms()
        async for page in record_pages(self._store):
            for rec in page:
                if rec.state == "running" and rec.node == me and rec.id not in self._running:
                    self._spawn(rec)
            # Not the expired ones: the sweeper may be deleting them right now.
            fresh = [rec for rec in page if not self._retention.expired(rec, now)]
            if added := await add_missing_entries(self._store, fresh):
                log.info("task records indexed", extra={"added": added})

    async def stop(self) -> None:
        """Cancel and await every running task (their records say where to resume)."""
        tasks = list(self._running.values())
        self._running.clear()
        for t in tasks:
            await cancel_and_wait(t)

    async def get(self, task_id: str) -> dict[str, Any]:
        item, cancel = await self._store.get_many([keys.task(task_id), keys.task_cancel(task_id)])
        if item is None:
            raise NotFound(f"task {task_id!r} not found")
        return _shown(decode_task(item.value), cancel is not None, self._clock.wall_ms())

    async def list_for(self, queue: str, kind: str, limit: int = 10) -> list[dict[str, Any]]:
        """The latest ``limit`` tasks of ``kind`` on ``queue``, newest first: a read of
        that queue's index entries only (see :mod:`.task_index`)."""
        now = self._clock.wall_ms()
        return [_shown(rec, c, now) for rec, c in await latest(self._store, queue, kind, limit)]

    async def cancel(self, task_id: str, queue: str) -> dict[str, Any]:
        """Ask a running redrive of ``queue`` to stop (see the module docstring); its
        record as now shown (``cancelling``, or ``cancelled`` when its node is gone)."""
        item = await self._store.get(keys.task(task_id))
        if item is None or decode_task(item.value).queue != queue:
            raise NotFound(f"task {task_id!r} of queue {queue!r} not found")
        rec, now = decode_task(item.value), self._clock.wall_ms()
        if rec.kind != "redrive":
            raise TaskNotRunning(
                f"task {task_id!r} is a {rec.kind}: only a redrive can be cancelled"
            )
        if rec.state != "running":
            raise TaskNotRunning(
                f"task {task_id!r} is {rec.state}: only a running task can be cancelled"
            )
        await self._store.put(keys.task_cancel(task_id), str(now).encode())
        if task_id in self._cancelled:
            self._cancelled[task_id].set()
        elif now - rec.updated_at_ms > STALE_MS:  # its node is gone: no one else will end it
            rec = replace(rec, state="cancelled", updated_at_ms=now)
            await self._save(rec)
        return _shown(rec, True, now)

    async def start_redrive(
        self, info: QueueInfo, to_queue: str | None, max_per_s: int
    ) -> dict[str, Any]:
        """Start moving ``info``'s messages back (see the module docstring)."""
        if not 1 <= max_per_s <= MAX_RATE_PER_S:
            raise InvalidInput(f"max_per_s must be an integer in 1..{MAX_RATE_PER_S}")
        if to_queue is not None:
            if to_queue == info.name:
                raise InvalidInput("to_queue must be another queue")
            try:
                await self._catalog.queue(to_queue)
            except QueueNotFound:
                raise QueueNotFound(f"to_queue {to_queue!r} does not exist.") from None
        return await self._create("redrive", info, to_queue, max_per_s)

    async def start_purge(self, info: QueueInfo) -> dict[str, Any]:
        """Start deleting every message of ``info`` enqueued before now."""
        return await self._create("purge", info, None, 0)

    async def _create(
        self, kind: str, info: QueueInfo, to_queue: str | None, max_per_s: int
    ) -> dict[str, Any]:
        now = self._clock.wall_ms()
        rec = TaskRecord(
            secrets.token_hex(16), kind, info.name, "running", 0, 0, self._node_name(), now, now,
            to_queue, max_per_s,
        )  # fmt: skip
        if kind == "purge":
            rec = replace(rec, ahead=await self._purger.lanes_ahead(info, now))
        await create_record(self._store, rec)
        self._spawn(rec)
        return rec.public(now)

    def _spawn(self, rec: TaskRecord) -> None:
        self._cancelled[rec.id] = asyncio.Event()
        self._running[rec.id] = asyncio.create_task(self._run(rec), name=f"task-{rec.id}")

    async def _save(self, rec: TaskRecord) -> None:
        await self._store.put(keys.task(rec.id), rec.encode())

    async def _run(self, rec: TaskRecord) -> None:
        log.info("queue task running", extra={"task": rec.id, "kind": rec.kind, "queue": rec.queue})
        try:
            info = await self._catalog.queue(rec.queue)
            if rec.kind == "redrive":
                rec = await self._redrive(info, rec)
            else:
                rec = await self._purger.run(info, rec)
            ended = "cancelled" if rec.state == "cancelled" else "done"
            await self._save(replace(rec, state=ended, updated_at_ms=self._clock.wall_ms()))
            log.info(
                "queue task cancelled" if ended == "cancelled" else "queue task done",
                extra={"task": rec.id, "kind": rec.kind, "moved": rec.moved},
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
            self._cancelled.pop(rec.id, None)

    async def _cancel_requested(self, rec: TaskRecord) -> bool:
        wake = self._cancelled.get(rec.id)
        if wake is not None and wake.is_set():
            return True
        return await self._store.get(keys.task_cancel(rec.id)) is not None

    async def _redrive(self, info: QueueInfo, rec: TaskRecord) -> TaskRecord:
        page = max(1, min(100, rec.max_per_s))
        while True:
            # Before each page (a resumed task too): a cancel from any node is seen
            # within a page; one made on this node also cuts the rate limit's sleep.
            if await self._cancel_requested(rec):
                return replace(rec, state="cancelled")
            began = self._clock.monotonic()
            start, end = keys.message(info.number, rec.cursor), keys.queue_messages(info.number)[1]
            rows = await self._store.scan(start, end, page)
            if not rows:
                return rec
            # The record after this page goes into the page's own batch where the
            # store orders it there like any put; elsewhere it follows the batch.
            after: list[TaskRecord] = []
            cursor = keys.message_id(rows[-1][0]) + 1
            progress = self._page_progress(rec, cursor, after)
            in_batch = self._store.records_settle_in_batches
            moved, skipped = await self._dead_letters.redrive_page(
                info, rows, rec.to_queue, progress if in_batch else None
            )
            self.crash.reached("redrive_page")
            if not in_batch:
                progress(moved, skipped)
                await self._save(after[-1])
            rec = after[-1]
            # Bounded rate: a page of n messages takes at least n / max_per_s seconds.
            left = len(rows) / rec.max_per_s - (self._clock.monotonic() - began)
            if left > 0:
                await self._sleep_unless_cancelled(rec.id, left)

    def _page_progress(
        self, before: TaskRecord, cursor: int, after: list[TaskRecord]
    ) -> Callable[[int, int], Put]:
        """The write of ``before``'s record once a page up to ``cursor`` moved and
        skipped what it says (the new record is appended to ``after``)."""

        def progress(moved: int, skipped: int) -> Put:
            rec = replace(
                before,
                moved=before.moved + moved,
                skipped=before.skipped + skipped,
                cursor=cursor,
                updated_at_ms=self._clock.wall_ms(),
            )
            after.append(rec)
            return Put(keys.task(rec.id), rec.encode())

        return progress

    async def _sleep_unless_cancelled(self, task_id: str, seconds: float) -> None:
        """The clock's sleep, cut short when this node is asked to cancel the task."""
        wake = self._cancelled.get(task_id)
        if wake is None:
            await self._clock.sleep(seconds)
            return
        sleeping = asyncio.create_task(self._clock.sleep(seconds))
        woken = asyncio.create_task(wake.wait())
        try:
            await asyncio.wait([sleeping, woken], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for f in (sleeping, woken):
                await cancel_and_wait(f)


def _shown(rec: TaskRecord, cancel_requested: bool, now_ms: int) -> dict[str, Any]:
    """``rec`` as shown: a running task asked to stop reads ``cancelling``."""
    out = rec.public(now_ms)
    if cancel_requested and out["state"] == "running":  # not once its node is gone
        out["state"] = "cancelling"
    return out
