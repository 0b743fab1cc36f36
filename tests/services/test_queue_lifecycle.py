"""Queue deletion is a tombstone: no stale view purges a live queue, purges resume anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from dynaq.clock import ManualClock
from dynaq.core import keys
from dynaq.core.messages import NewMessage
from dynaq.errors import Conflict, InvalidInput, NotServing, QueueNotFound
from dynaq.node import Node
from dynaq.services.queue_records import RedrivePolicy
from dynaq.storage.memory import MemoryStore
from tests.fixtures.nodes import node_config


async def _node(tmp_path: Path, name: str, store: MemoryStore, clock: ManualClock) -> Node:
    n = Node(node_config(tmp_path / name, node={"name": name}), clock=clock, store=store)
    await n.start()
    return n


async def test_a_queue_vanishing_from_one_nodes_view_is_not_purged(tmp_path: Path) -> None:
    store, clock = MemoryStore(), ManualClock()
    a = await _node(tmp_path, "a", store, clock)
    b = await _node(tmp_path, "b", store, clock)
    try:
        await a.catalog.create_queue("q")
        await a.queues.enqueue("q", [NewMessage(b"%d" % i) for i in range(10)])
        await b.catalog.queue("q")  # b reads it through
        b.catalog._set_queue("q", None)  # what a reload that raced the create did
        await b.queues.wait_for_purges()
        assert len(await a.queues.receive("q", 100)) == 10
    finally:
        await b.stop()
        await a.stop()


async def test_a_queue_is_never_seen_without_the_settings_it_was_created_with(
    tmp_path: Path,
) -> None:
    store, clock = MemoryStore(), ManualClock()
    a = await _node(tmp_path, "a", store, clock)
    b = await _node(tmp_path, "b", store, clock)
    try:
        await a.catalog.create_queue("dlq.fifo", {"fifo": True})
        settings = {
            "fifo": True,
            "content_based_dedup": True,
            "visibility_timeout_s": 7.0,
            "redrive_policy": RedrivePolicy("dlq.fifo", 3),
        }
        await a.catalog.create_queue("jobs.fifo", settings)
        # b reads the record the create wrote: there is no moment with defaults
        seen = (await b.catalog.queue("jobs.fifo")).settings
        assert (seen.fifo, seen.content_based_dedup, seen.visibility_timeout_s) == (True, True, 7.0)
        assert seen.redrive_policy == RedrivePolicy("dlq.fifo", 3)
        # settings that cannot hold create nothing at all
        with pytest.raises(InvalidInput, match="content_based_dedup needs a FIFO queue"):
            await a.catalog.create_queue("bad", {"content_based_dedup": True})
        with pytest.raises(InvalidInput, match="does not exist"):
            await a.catalog.create_queue("bad", {"redrive_policy": RedrivePolicy("nope", 2)})
        with pytest.raises(QueueNotFound):
            await b.catalog.queue("bad")
        assert await store.get(keys.queue_config("bad")) is None
    finally:
        await b.stop()
        await a.stop()


async def test_purge_of_a_deleted_queue_resumes_on_another_node(tmp_path: Path) -> None:
    store, clock = MemoryStore(), ManualClock()
    a = await _node(tmp_path, "a", store, clock)
    await a.catalog.create_queue("q")
    await a.queues.enqueue("q", [NewMessage(b"x") for _ in range(10)])
    a.queues.upkeep.start_purge = lambda number, tomb=None: None  # type: ignore[method-assign]
    await a.catalog.delete_queue("q")  # ... and a never purges (it died)
    assert len(await store.list_keys(b"m", 100)) == 10
    b = await _node(tmp_path, "b", store, clock)  # start: reload finds the tombstone
    try:
        await b.queues.wait_for_purges()
        assert await store.list_keys(b"m", 100) == []
        # Kept until a write admitted before the delete can no longer land (a node's
        # cached config, a slow body); then a round sweeps once more and marks it.
        assert "q" in b.catalog.tombstones
        clock.advance(b.queues.upkeep.settle_s)
        b.queues.upkeep.resume_purges()
        await b.queues.wait_for_purges()
        await b.catalog.reload()
        assert not b.catalog.tombstones
    finally:
        await b.stop()
        await a.stop()


async def test_recreate_waits_until_no_node_can_hold_the_old_queue(tmp_path: Path) -> None:
    store, clock = MemoryStore(), ManualClock()
    a = await _node(tmp_path, "a", store, clock)
    try:
        old = await a.catalog.create_queue("q")
        await a.catalog.delete_queue("q")
        with pytest.raises(Conflict):
            await a.catalog.create_queue("q")
        clock.advance(a.catalog.recreate_after_s)
        new = await a.catalog.create_queue("q")
        assert new.number != old.number
    finally:
        await a.stop()


async def test_a_stale_cache_entry_is_read_through_after_its_ttl(tmp_path: Path) -> None:
    store, clock = MemoryStore(), ManualClock()
    a = await _node(tmp_path, "a", store, clock)
    b = await _node(tmp_path, "b", store, clock)
    try:
        await a.catalog.create_queue("q")
        await b.catalog.queue("q")
        await a.catalog.delete_queue("q")
        clock.advance(b.config.sync.interval_s + 0.1)
        with pytest.raises(Exception, match="did not exist"):
            await b.catalog.queue("q")
    finally:
        await b.stop()
        await a.stop()


async def test_no_receives_outside_the_ring(tmp_path: Path) -> None:
    """Before joining the ring a node's view of its slice is wrong, and after handing its
    in-flight messages over on a drain it must not serve more: either would duplicate."""
    store, clock = MemoryStore(), ManualClock()
    a = await _node(tmp_path, "a", store, clock)
    try:
        await a.catalog.create_queue("q")
        await a.queues.enqueue("q", [NewMessage(b"x")])
        a.queues.receiver.in_ring = False  # as between HTTP up and the ring join
        with pytest.raises(NotServing) as exc:
            await a.queues.receive("q", 1)
        assert exc.value.status == 503 and exc.value.retriable
        a.queues.receiver.in_ring = True
        a.queues.drain()
        assert await a.queues.receive("q", 1, wait_time_s=5) == []
    finally:
        await a.stop()


async def test_depth_is_exact_after_a_restart(tmp_path: Path) -> None:
    clock = ManualClock()
    node = Node(node_config(tmp_path), clock=clock)
    await node.start()
    await node.catalog.create_queue("q")
    await node.queues.enqueue("q", [NewMessage(b"x") for _ in range(300)])
    await node.stop()
    node = Node(node_config(tmp_path), clock=clock)
    await node.start()  # the store kept the count: nothing is recounted
    try:
        await node.queues.upkeep.wait_counted()
        assert await node.queues.depth(await node.catalog.queue("q")) == 300
    finally:
        await node.stop()


async def test_a_write_that_lands_after_the_purge_is_swept_by_a_later_round(
    tmp_path: Path,
) -> None:
    """A request that resolved the queue before its delete (a cached config on another
    node, a body still arriving) may commit after the first purge pass: the tombstone
    stays unpurged, and a later round removes what landed."""
    store, clock = MemoryStore(), ManualClock()
    a = await _node(tmp_path, "a", store, clock)
    try:
        info = await a.catalog.create_queue("q")
        await a.catalog.delete_queue("q")
        await a.queues.wait_for_purges()
        late = keys.message(info.number, 12345)
        await store.put(late, b"landed late")
        clock.advance(a.queues.upkeep.settle_s)
        a.queues.upkeep.resume_purges()
        await a.queues.wait_for_purges()
        assert await store.get(late) is None
        await a.catalog.reload()
        assert not a.catalog.tombstones
    finally:
        await a.stop()


async def test_a_delete_cut_short_after_its_tombstone_leaves_no_subscription(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between a delete's tombstone and its unsubscribes left the queue on its
    topics; the purge of the tombstone now removes it, and a queue created again
    under the name never inherits the old one's subscriptions."""
    store, clock = MemoryStore(), ManualClock()
    a = await _node(tmp_path, "a", store, clock)
    try:
        for q in ("q", "other"):
            await a.catalog.create_queue(q)
        await a.catalog.create_topic("t")
        await a.catalog.subscribe("t", "q")
        await a.catalog.subscribe("t", "other")

        async def crash(queue: str) -> None:
            raise RuntimeError("the node died here")

        monkeypatch.setattr(a.catalog, "_unsubscribe_everywhere", crash)
        with pytest.raises(RuntimeError):
            await a.catalog.delete_queue("q")
    finally:
        await a.stop()
    monkeypatch.undo()
    b = await _node(tmp_path, "b", store, clock)
    try:
        assert "q" in (await b.catalog.topic("t", fresh=True)).queues  # the crash's leftover
        clock.advance(b.catalog.recreate_after_s + 1)
        await b.catalog.create_queue("q")  # before or after its purge: no old subscription
        assert list((await b.catalog.topic("t", fresh=True)).queues) == ["other"]
        got = await b.topics.publish("t", [NewMessage(b"after")])
        assert sorted(got) == ["other"]
    finally:
        await b.stop()


async def test_a_deleted_queues_delayed_messages_are_purged_with_it(tmp_path: Path) -> None:
    """A delay can outlast the deleted queue's tombstone: the purge removes the
    messages still waiting, so none stays in the store for ever."""
    store, clock = MemoryStore(), ManualClock()
    a = await _node(tmp_path, "a", store, clock)
    try:
        await a.catalog.create_queue("q")
        await a.catalog.create_queue("other")
        await a.queues.enqueue("q", [NewMessage(b"later", delay_s=900)] * 3)
        await a.queues.enqueue("other", [NewMessage(b"kept", delay_s=900)])
        await a.catalog.delete_queue("q")
        await a.queues.wait_for_purges()
        clock.advance(a.queues.upkeep.settle_s)
        a.queues.upkeep.resume_purges()
        await a.queues.wait_for_purges()
        waiting = await store.scan(keys.DELAYED, keys.DELAYED + b"\xff", 100)
        assert [v for _, v in waiting] and len(waiting) == 1  # only "other"'s
    finally:
        await a.stop()
