"""The per-queue index of background tasks, and walks over every task record.

A task's index entry (:func:`dynaq.core.keys.task_index`: queue, kind, inverted
start time, id; empty value) never changes: a task's queue, kind, start and id
are fixed at its creation. Guarantees:

* A task created by this release has its entry from the moment its record
  exists. Where records settle in batches (LMDB, memory) the two are one store
  batch; on Cassandra and Riak the record is put on its own first (as every
  write of it is, see :attr:`~dynaq.storage.base.Store.records_settle_in_batches`)
  and the entry follows, so a crash between them leaves a record without an
  entry, which the next start of any node adds (:func:`add_missing_entries`).
* Records without an entry (written by an earlier release, or cut short as
  above) are indexed by every node's start, which walks every task record
  anyway to resume its own; finished records already past retention are left
  to the sweeper (:mod:`.task_retention`), not indexed again.
* :func:`latest` reads one queue's entries of one kind, newest first, and stops
  at ``limit`` records: its cost does not grow with other queues' tasks. An
  entry whose record is gone is skipped (a start indexing a record in the
  instant another node's sweep deletes it can leave one; the sweeper deletes
  entries only with their records).
* :func:`record_pages` walks every task record page by page: no cap, however
  many there are.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from dynaq.core import keys
from dynaq.services.queues.task_record import TaskRecord, decode_task
from dynaq.storage.base import Put, Store, prefix_end

PAGE = 500
"""Task records read per store call when walking them all."""


def index_entry(rec: TaskRecord) -> bytes:
    """The key of ``rec``'s index entry."""
    return keys.task_index(rec.queue, rec.kind, rec.started_at_ms, rec.id)


async def create_record(store: Store, rec: TaskRecord) -> None:
    """Write a new task's first record and its index entry (see the module docstring)."""
    record, entry = Put(keys.task(rec.id), rec.encode()), Put(index_entry(rec), b"")
    if store.records_settle_in_batches:
        await store.write_batch([entry, record])
        return
    await store.put(record.key, record.value)
    # Written once, always the same empty value: a batch replayed later cannot
    # put anything older back, so it need not be ordered like the record.
    await store.write_batch([entry])


async def record_pages(store: Store, page: int = PAGE) -> AsyncIterator[list[TaskRecord]]:
    """Every task record, ``page`` at a time, in key (task id) order."""
    start, end = keys.TASK, keys.task_end()
    while True:
        rows = await store.scan(start, end, page)
        if rows:
            yield [decode_task(raw) for _, raw in rows]
        if len(rows) < page:
            return
        start = rows[-1][0] + b"\x00"


async def add_missing_entries(store: Store, recs: Sequence[TaskRecord]) -> int:
    """Write the index entries of ``recs`` that are not stored; return how many."""
    if not recs:
        return 0
    entries = [index_entry(rec) for rec in recs]
    found = await store.get_many(entries)
    missing = [Put(key, b"") for key, item in zip(entries, found, strict=True) if item is None]
    if missing:
        await store.write_batch(missing)
    return len(missing)


async def latest(store: Store, queue: str, kind: str, limit: int) -> list[tuple[TaskRecord, bool]]:
    """The latest ``limit`` tasks of ``kind`` on ``queue``, newest first, each with
    whether it was asked to cancel."""
    prefix = keys.task_index_prefix(queue, kind)
    start, end = prefix, prefix_end(prefix)
    found: list[tuple[TaskRecord, bool]] = []
    while len(found) < limit:
        want = limit - len(found)
        rows = await store.scan(start, end, want)
        if not rows:
            break
        ids = [keys.task_index_fields(prefix, key)[1] for key, _ in rows]
        items = await store.get_many(
            [keys.task(i) for i in ids] + [keys.task_cancel(i) for i in ids]
        )
        for item, cancel in zip(items[: len(ids)], items[len(ids) :], strict=True):
            if item is not None:  # an entry left behind by a race (module docstring)
                found.append((decode_task(item.value), cancel is not None))
        if len(rows) < want:
            break
        start = rows[-1][0] + b"\x00"
    return found
