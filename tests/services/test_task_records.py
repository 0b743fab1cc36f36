"""Background task records: resumed however many there are, listed per queue from
their index, indexed when an earlier release wrote them, and swept once finished
and past their retention (manual clock; memory, LMDB, and a memory store that
takes the Cassandra/Riak path where records do not settle in batches)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path

import pytest

from dynaq.clock import ManualClock
from dynaq.core import keys
from dynaq.core.messages import NewMessage
from dynaq.node import Node
from dynaq.services.queues.task_index import PAGE, create_record, index_entry
from dynaq.services.queues.task_record import TaskRecord, decode_task
from dynaq.services.queues.task_retention import SWEEP_INTERVAL_S, TaskRetention
from dynaq.storage.base import Put, Store
from dynaq.storage.memory import MemoryStore
from tests.fixtures.nodes import node_config

HOUR_S = 3600.0
ME = "test-node"


class UnbatchedMemoryStore(MemoryStore):
    """A memory store whose records are written outside batches, as on Cassandra and
    Riak: task records take their single-put path."""

    records_settle_in_batches = False


class ScanLog(MemoryStore):
    """A memory store that notes the range of every scan."""

    def __init__(self) -> None:
        super().__init__()
        self.scans: list[tuple[bytes, bytes]] = []

    async def scan(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        self.scans.append((start, end))
        return await super().scan(start, end, limit)


StartNode = Callable[[], Awaitable[Node]]


@pytest.fixture(params=["memory", "embedded", "unbatched"])
async def nodes(
    request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock
) -> AsyncIterator[StartNode]:
    """Starts nodes on one store (an hour's task retention), one after the other:
    each stops the one before, as a restart does."""
    shared: Store | None = None  # embedded: the LMDB files under tmp_path
    if request.param == "memory":
        shared = MemoryStore()
    elif request.param == "unbatched":
        shared = UnbatchedMemoryStore()
    running: list[Node] = []

    async def start() -> Node:
        for n in running:
            await n.stop()
        running.clear()
        cfg = node_config(tmp_path, queues={"task_retention_s": HOUR_S})
        n = Node(cfg, clock=clock, store=shared)
        running.append(n)
        await n.start()
        return n

    yield start
    for n in running:
        await n.stop()


def _rec(
    task_id: str, queue: str, kind: str, state: str, started: int, updated: int | None = None
) -> TaskRecord:
    return TaskRecord(
        task_id, kind, queue, state, 0, 0, ME, started, started if updated is None else updated
    )


async def _wait(check: Callable[[], Awaitable[bool]], what: str) -> None:
    for _ in range(400):
        if await check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never: {what}")


async def _done(node: Node, task_id: str) -> bool:
    return bool((await node.queues.tasks.get(task_id))["state"] == "done")


async def _none(store: Store, key: bytes) -> bool:
    return await store.get(key) is None


async def test_a_running_task_is_resumed_behind_more_than_ten_thousand_records(
    nodes: StartNode, clock: ManualClock
) -> None:
    """The resumed task's id sorts after 10,000 others (the old scan's cap)."""
    a = await nodes()
    await a.catalog.create_queue("q")
    await a.queues.enqueue("q", [NewMessage(b"%d" % i) for i in range(5)])
    now = clock.wall_ms()
    filler = [_rec(f"{i:032x}", f"f{i % 7}", "purge", "done", now - i) for i in range(10_000)]
    running = _rec("f" * 32, "q", "purge", "running", now)
    await a.store.write_batch([Put(keys.task(r.id), r.encode()) for r in [*filler, running]])
    b = await nodes()  # a stops: the record is left running, as by a crash
    await _wait(lambda: _done(b, running.id), "the purge resumed and ended")
    assert (await b.queues.tasks.get(running.id))["moved"] == 5
    assert await b.store.list_keys(keys.MESSAGE, 10) == []
    # The start indexed every record it walked: the filler's queues list theirs.
    assert len(await b.queues.tasks.list_for("f3", "purge", 10_000)) == len(filler[3::7])


async def test_list_for_reads_one_queues_index_newest_first_within_the_limit(
    clock: ManualClock, tmp_path: Path
) -> None:
    store = ScanLog()
    node = Node(node_config(tmp_path), clock=clock, store=store)
    await node.start()
    try:
        for q in ("q", "q2", "dlq"):
            await node.catalog.create_queue(q)
        info, tasks = await node.catalog.queue("q"), node.queues.tasks
        started = []
        for _ in range(3):  # real purges, a second apart
            started.append((await tasks.start_purge(info))["id"])
            clock.advance(1)
        redrive = (await tasks.start_redrive(info, "dlq", 10))["id"]
        other = await tasks.start_purge(await node.catalog.queue("q2"))  # "q" is its prefix
        # A record of an earlier instant that is written later still sorts by its start.
        old = _rec("0" * 32, "q", "purge", "done", clock.wall_ms() - 60_000)
        await create_record(store, old)
        for t in [*started, other["id"]]:
            await _wait(partial(_done, node, t), "purge done")
        store.scans.clear()
        purges = await tasks.list_for("q", "purge", 10)
        assert [p["id"] for p in purges] == [*reversed(started), old.id]
        assert all(p["queue"] == "q" and p["state"] == "done" for p in purges)
        assert [p["id"] for p in await tasks.list_for("q", "purge", 2)] == started[:0:-1]
        assert [p["id"] for p in await tasks.list_for("q", "redrive", 10)] == [redrive]
        assert [p["id"] for p in await tasks.list_for("q2", "purge", 10)] == [other["id"]]
        assert await tasks.list_for("dlq", "purge", 10) == []
        # The index was scanned, never the task records' range.
        assert any(s.startswith(keys.TASK_INDEX) for s, _ in store.scans)
        assert not any(s.startswith(keys.TASK) for s, _ in store.scans)
        # An entry whose record is gone is skipped, and the limit still filled.
        await store.delete(keys.task(started[-1]))
        assert [p["id"] for p in await tasks.list_for("q", "purge", 2)] == started[1::-1]
    finally:
        await node.stop()


async def test_records_of_an_earlier_release_are_indexed_at_start(
    nodes: StartNode, clock: ManualClock
) -> None:
    a = await nodes()
    now = clock.wall_ms()
    unindexed = [_rec(f"{i:032x}", "q", "purge", "done", now - 1000 * i) for i in range(5)]
    expired = _rec("e" * 32, "q", "purge", "done", now - 10_000_000, now - 4_000_000)
    # Written as an earlier release did: the record alone.
    await a.store.write_batch([Put(keys.task(r.id), r.encode()) for r in [*unindexed, expired]])
    assert await a.queues.tasks.list_for("q", "purge") == []
    b = await nodes()
    listed = await b.queues.tasks.list_for("q", "purge", 10)
    assert [t["id"] for t in listed] == [r.id for r in unindexed]  # newest first
    # Past its retention: left to the sweeper, not indexed again.
    assert await b.store.get(index_entry(expired)) is None
    assert await b.queues.task_retention.sweep() == 1
    assert await b.store.get(keys.task(expired.id)) is None


async def test_finished_tasks_past_retention_go_with_their_entries_and_cancel_requests(
    nodes: StartNode, clock: ManualClock
) -> None:
    node = await nodes()
    store, now, old = node.store, clock.wall_ms(), int(HOUR_S * 1000) + 1
    doomed = [
        _rec("a" * 32, "q", "purge", "done", now - old - 5000, now - old),
        _rec("b" * 32, "q", "redrive", "cancelled", now - old - 5000, now - old),
        _rec("c" * 32, "dlq", "redrive", "failed", now - 2 * old, now - old),
    ]
    kept = [
        _rec("d" * 32, "q", "redrive", "running", now - 2 * old, now - old),  # interrupted
        _rec("e" * 32, "q", "purge", "done", now - old, now - old + 120_000),  # 2 min younger
    ]
    for r in [*doomed, *kept]:
        await create_record(store, r)
        await store.put(keys.task_cancel(r.id), b"0")
    # The node's upkeep sweeps every minute of its clock.
    clock.advance(SWEEP_INTERVAL_S)
    await _wait(lambda: _none(store, keys.task(doomed[-1].id)), "the sweep")
    for r in doomed:
        assert (
            await store.get_many([keys.task(r.id), index_entry(r), keys.task_cancel(r.id)])
            == [None] * 3
        )
    for r in kept:
        assert None not in await store.get_many(
            [keys.task(r.id), index_entry(r), keys.task_cancel(r.id)]
        )
    assert [t["id"] for t in await node.queues.tasks.list_for("q", "purge")] == [kept[1].id]
    assert (await node.queues.tasks.get(kept[0].id))["state"] == "interrupted"
    # An hour on, the recent one goes too; the running one never does.
    clock.advance(HOUR_S)
    await _wait(lambda: _none(store, keys.task(kept[1].id)), "the next sweep")
    assert await store.get(keys.task(kept[0].id)) is not None


async def test_a_sweep_reads_a_bounded_number_of_pages_and_every_node_may_sweep(
    nodes: StartNode, clock: ManualClock
) -> None:
    node = await nodes()
    store, now = node.store, clock.wall_ms()
    ended = now - int(HOUR_S * 1000) - 1
    recs = [_rec(f"{i:032x}", f"q{i % 3}", "purge", "done", ended, ended) for i in range(1200)]
    await _write_indexed(store, recs)
    mine = node.queues.task_retention
    assert [await mine.sweep(pages=1) for _ in range(4)] == [PAGE, PAGE, 1200 - 2 * PAGE, 0]
    await _write_indexed(store, recs)
    # Two nodes sweeping at once delete each task once between them.
    theirs = TaskRetention(store, clock, HOUR_S)
    done = await asyncio.gather(mine.sweep(pages=3), theirs.sweep(pages=3))
    assert sum(done) == 1200 and await store.list_keys(keys.TASK, 10) == []
    assert await store.list_keys(keys.TASK_INDEX, 10) == []


async def _write_indexed(store: Store, recs: Sequence[TaskRecord]) -> None:
    await store.write_batch(
        [op for r in recs for op in (Put(keys.task(r.id), r.encode()), Put(index_entry(r), b""))]
    )


async def test_a_new_tasks_record_and_entry_are_written_together(
    nodes: StartNode, clock: ManualClock
) -> None:
    node = await nodes()
    await node.catalog.create_queue("q")
    shown = await node.queues.tasks.start_purge(await node.catalog.queue("q"))
    item = await node.store.get(keys.task(shown["id"]))
    assert item is not None
    rec = decode_task(item.value)
    assert await node.store.get(index_entry(rec)) is not None
    prefix = keys.task_index_prefix("q", "purge")
    assert keys.task_index_fields(prefix, index_entry(rec)) == (clock.wall_ms(), rec.id)
