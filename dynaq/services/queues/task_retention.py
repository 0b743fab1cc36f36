"""Retention of finished background tasks: their records go ``retention_s`` after they ended.

The node's upkeep (:mod:`.upkeep`) calls :meth:`TaskRetention.sweep` every
:data:`SWEEP_INTERVAL_S` of the injected clock. Guarantees:

* A task that ended (``done``, ``cancelled`` or ``failed``) more than
  ``retention_s`` ago (by its record's last update, the node clock that wrote it
  against this node's) loses its record, its index entry and its cancel request,
  within a sweep cycle. A ``running`` record is never deleted, also when its
  node is gone (it reads ``interrupted``: a cancel ends it, and then it ages out).
* Each call reads at most ``pages`` pages of :data:`PAGE` records, from a cursor
  that moves on with each call and starts over past the last record, so a
  round's cost is bounded however many records there are, and every record is
  looked at once per cycle of ``records / (pages * PAGE)`` rounds.
* Every node sweeps: two sweeps deleting the same task is harmless (a delete of
  an absent key is no error). The entry and the cancel request go first, the
  record last (in one store batch where records settle in batches), so a sweep
  cut short leaves a record that the next cycle finds again, never an entry
  whose record nobody would find.
* ``retention_s`` must be at least the SQS ``PurgeQueue`` interval (the config
  refuses less), so the purge that holds a queue is never swept while it holds.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.services.queues.task_index import index_entry
from dynaq.services.queues.task_record import TaskRecord, decode_task
from dynaq.storage.base import Delete, Store

log = logging.getLogger(__name__)

FINAL_STATES = frozenset({"done", "cancelled", "failed"})
"""States a task's record is never written out of (see :mod:`.tasks`)."""
DEFAULT_RETENTION_S = 14 * 86_400.0
"""As long as AWS keeps a queue's message move tasks listed."""
SWEEP_INTERVAL_S = 60.0
PAGE = 500
SWEEP_PAGES = 4


class TaskRetention:
    """Deletes finished task records once they are ``retention_s`` old."""

    def __init__(self, store: Store, clock: Clock, retention_s: float) -> None:
        self._store = store
        self._clock = clock
        self.retention_ms = int(retention_s * 1000)
        self._cursor: bytes | None = None

    def expired(self, rec: TaskRecord, now_ms: int) -> bool:
        """Whether ``rec`` ended more than the retention before ``now_ms``."""
        return rec.state in FINAL_STATES and now_ms - rec.updated_at_ms > self.retention_ms

    async def sweep(self, pages: int = SWEEP_PAGES) -> int:
        """Delete the expired tasks among the next ``pages`` pages of records; return
        how many records this call removed."""
        now = self._clock.wall_ms()
        start, end = self._cursor or keys.TASK, keys.task_end()
        removed = 0
        for _ in range(pages):
            rows = await self._store.scan(start, end, PAGE)
            expired = [
                rec for rec in (decode_task(raw) for _, raw in rows) if self.expired(rec, now)
            ]
            if expired:
                removed += await self._delete(expired)
            if len(rows) < PAGE:
                self._cursor = None  # the next call starts over
                break
            start = self._cursor = rows[-1][0] + b"\x00"
        if removed:
            log.info("finished task records removed", extra={"removed": removed})
        return removed

    async def _delete(self, recs: Sequence[TaskRecord]) -> int:
        entries = [Delete(index_entry(rec)) for rec in recs]
        cancels = [Delete(keys.task_cancel(rec.id)) for rec in recs]
        records = [Delete(keys.task(rec.id)) for rec in recs]
        if self._store.records_settle_in_batches:
            flags = await self._store.write_batch([*entries, *cancels, *records])
            return sum(flags[-len(records) :])
        # Cassandra, Riak: the entries were written in batches and go in one; a
        # record and a cancel request were written by single puts (Paxos on
        # Cassandra), and go by single deletes, ordered after those puts.
        await self._store.write_batch(entries)
        removed = 0
        for cancel, record in zip(cancels, records, strict=True):
            await self._store.delete(cancel.key)
            removed += await self._store.delete(record.key)
        return removed
