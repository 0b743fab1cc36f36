"""Message groups (FIFO per group, one in flight) and deduplication ids."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable
from typing import Any

import aiohttp
import pytest

from dynaq.clock import ManualClock
from dynaq.core import keys
from dynaq.core.ids import lane_of
from dynaq.core.messages import NewMessage
from dynaq.errors import StorageUnavailable
from dynaq.node import Node
from dynaq.storage.base import prefix_end


async def test_group_delivers_in_order_one_at_a_time(node: Node) -> None:
    await node.catalog.create_queue("q")
    for i in range(5):
        await node.queues.enqueue("q", [NewMessage(b"a%d" % i, group="A")])
        await node.queues.enqueue("q", [NewMessage(b"b%d" % i, group="B")])
    first = await node.queues.receive("q", 10)
    assert sorted(m.body for m in first) == [b"a0", b"b0"]  # one per group in flight
    assert await node.queues.receive("q", 10) == []
    a0 = next(m for m in first if m.group == "A")
    await node.queues.delete("q", [a0.id])
    assert [m.body for m in await node.queues.receive("q", 10)] == [b"a1"]


async def test_group_head_expiry_redelivers_head_not_successor(
    node: Node, clock: ManualClock
) -> None:
    await node.catalog.create_queue("q")
    await node.queues.enqueue(
        "q", [NewMessage(b"1", group="g"), NewMessage(b"2", group="g"), NewMessage(b"x")]
    )
    got = await node.queues.receive("q", 10, visibility_timeout_s=5)
    assert sorted(m.body for m in got) == [b"1", b"x"]
    clock.advance(6)
    again = await node.queues.receive("q", 10)
    assert sorted((m.body, m.receive_count) for m in again) == [(b"1", 2), (b"x", 2)]


async def test_concurrent_consumers_see_each_group_in_order(node: Node) -> None:
    await node.catalog.create_queue("q")
    keys_ = [f"k{i}" for i in range(20)]
    for seq in range(30):
        batch = [NewMessage(f"{k}:{seq}".encode(), group=k) for k in keys_]
        random.shuffle(batch)
        await node.queues.enqueue("q", batch)
    seen: dict[str, list[int]] = {k: [] for k in keys_}

    async def consumer() -> None:
        idle = 0
        while idle < 3:
            msgs = await node.queues.receive("q", 5)
            if not msgs:
                idle += 1
                await asyncio.sleep(0)
                continue
            idle = 0
            for m in msgs:
                k, seq = m.body.decode().split(":")
                seen[k].append(int(seq))
            await asyncio.sleep(0)
            await node.queues.delete("q", [m.id for m in msgs])

    await asyncio.gather(*(consumer() for _ in range(6)))
    for k in keys_:
        assert seen[k] == list(range(30)), k


async def test_dedup_returns_first_id_and_stores_once(node: Node, clock: ManualClock) -> None:
    await node.catalog.create_queue("q")
    (a,) = await node.queues.enqueue("q", [NewMessage(b"one", dedup_id="d1")])
    (b,) = await node.queues.enqueue("q", [NewMessage(b"two", dedup_id="d1")])
    assert a == b
    c, d, e = await node.queues.enqueue(
        "q",
        [
            NewMessage(b"3", dedup_id="d2"),
            NewMessage(b"4", dedup_id="d2"),
            NewMessage(b"5", dedup_id="d1"),
        ],
    )
    assert c == d and e == a
    info = await node.catalog.queue("q")
    assert await node.queues.depth(info) == 2
    got = await node.queues.receive("q", 10)
    assert sorted(m.body for m in got) == [b"3", b"one"]
    assert await _dedup_records(node) == 2
    clock.advance(301)  # past the window: the id is new again
    (f,) = await node.queues.enqueue("q", [NewMessage(b"again", dedup_id="d1")])
    assert f != a
    assert await _dedup_records(node) >= 1  # the new d1 is inside its window
    # Two windows on, every record is in a wholly expired bucket: the sweeper,
    # woken by the clock, removes them with one range delete.
    clock.advance(2 * 300 + 1)
    for _ in range(100):
        if await _dedup_records(node) == 0:
            break
        await asyncio.sleep(0.05)
    assert await _dedup_records(node) == 0


async def _dedup_records(node: Node) -> int:
    n = 0
    for prefix in (keys.DEDUP, keys.DEDUP_BUCKETED):
        n += len(await node.store.scan(prefix, prefix_end(prefix), 100))
    return n


async def test_concurrent_duplicate_enqueues_write_once(node: Node) -> None:
    await node.catalog.create_queue("q")
    ids = await asyncio.gather(
        *(node.queues.enqueue("q", [NewMessage(b"x", dedup_id="same")]) for _ in range(20))
    )
    assert len({i[0] for i in ids}) == 1
    assert await node.queues.depth(await node.catalog.queue("q")) == 1


def _slow_writes(node: Node, delay_s: float, fail: set[int] | None = None) -> list[int]:
    """Make the store's writes take ``delay_s`` (failing the ``fail``-th ones, from 0);
    returns the list the number of writes in flight is appended to at each start."""
    real_write = node.store.write_batch
    flying = [0]
    seen: list[int] = []
    calls = [0]

    async def slow_write(ops: Any) -> list[bool]:
        n = calls[0]
        calls[0] += 1
        flying[0] += 1
        seen.append(flying[0])
        try:
            await asyncio.sleep(delay_s)
            if fail and n in fail:
                raise StorageUnavailable("the disk went away")
            return await real_write(ops)
        finally:
            flying[0] -= 1

    node.store.write_batch = slow_write  # type: ignore[method-assign]
    return seen


async def test_writes_with_distinct_dedup_ids_share_commits(node: Node) -> None:
    """The dedup lock covers the check, not the write: concurrent senders with their
    own dedup ids (every SQS FIFO send) are written together, not one at a time."""
    await node.catalog.create_queue("q")
    await node.catalog.create_topic("t")
    await node.catalog.subscribe("t", "q")
    in_flight = _slow_writes(node, 0.05)
    sends: list[Awaitable[object]] = [
        node.queues.enqueue("q", [NewMessage(b"x", dedup_id=f"s{i}")]) for i in range(16)
    ]
    sends += [node.topics.publish("t", [NewMessage(b"y", dedup_id=f"p{i}")]) for i in range(8)]
    t0 = asyncio.get_running_loop().time()
    await asyncio.gather(*sends)
    assert max(in_flight) >= 8, in_flight
    assert asyncio.get_running_loop().time() - t0 < 0.05 * 24 / 2
    assert await node.queues.depth(await node.catalog.queue("q")) == 24


async def test_a_duplicate_of_a_write_in_flight_waits_for_it(node: Node) -> None:
    """A retry arriving while the first copy is still being written gets the first
    copy's id once it has landed, and is not stored again; if the first write fails
    whole (as an LMDB commit does), the retry stores the message."""
    await node.catalog.create_queue("q")
    _slow_writes(node, 0.05)
    first = asyncio.ensure_future(node.queues.enqueue("q", [NewMessage(b"x", dedup_id="r1")]))
    await asyncio.sleep(0.01)  # the first is being written
    again = await node.queues.enqueue("q", [NewMessage(b"x", dedup_id="r1")])
    assert again == await first
    assert await node.queues.depth(await node.catalog.queue("q")) == 1
    _slow_writes(node, 0.05, fail={0})
    doomed = asyncio.ensure_future(node.queues.enqueue("q", [NewMessage(b"z", dedup_id="r2")]))
    await asyncio.sleep(0.01)
    (retry,) = await node.queues.enqueue("q", [NewMessage(b"z", dedup_id="r2")])
    with pytest.raises(StorageUnavailable):
        await doomed
    got = await node.queues.receive("q", 10)
    assert sorted(m.body for m in got) == [b"x", b"z"]
    assert retry in {m.id for m in got}


async def test_a_retry_waiting_for_a_slow_write_does_not_hold_up_other_senders(
    node: Node,
) -> None:
    """While a retry waits for its first copy's slow write, senders with other dedup
    ids to the same queue go on (it waits without the queue's check lock)."""
    await node.catalog.create_queue("q")
    real_write = node.store.write_batch
    slow_once = [True]

    async def write(ops: Any) -> list[bool]:
        if slow_once[0]:
            slow_once[0] = False
            await asyncio.sleep(1.0)  # the first copy's write: a slow store
        return await real_write(ops)

    node.store.write_batch = write  # type: ignore[method-assign]
    first = asyncio.ensure_future(node.queues.enqueue("q", [NewMessage(b"x", dedup_id="r1")]))
    await asyncio.sleep(0.05)
    retry = asyncio.ensure_future(node.queues.enqueue("q", [NewMessage(b"x", dedup_id="r1")]))
    await asyncio.sleep(0.05)  # the retry now waits for the first write
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    others = await asyncio.gather(
        *(node.queues.enqueue("q", [NewMessage(b"o", dedup_id=f"o{i}")]) for i in range(5))
    )
    assert loop.time() - t0 < 0.5 and not retry.done()
    assert await retry == await first
    assert await node.queues.depth(await node.catalog.queue("q")) == 1 + len(others)


async def test_topic_publish_dedups_per_queue(node: Node) -> None:
    for q in ("a", "b"):
        await node.catalog.create_queue(q)
    await node.catalog.create_topic("t")
    await node.catalog.subscribe("t", "a")
    first = await node.topics.publish("t", [NewMessage(b"x", dedup_id="r1", group="k")])
    await node.catalog.subscribe("t", "b")
    second = await node.topics.publish("t", [NewMessage(b"x", dedup_id="r1", group="k")])
    assert second["a"] == first["a"]  # a had it already
    assert set(second) == {"a", "b"}
    got = await node.queues.receive("b", 10)
    assert [(m.body, m.group) for m in got] == [(b"x", "k")]


async def test_group_and_dedup_over_http(http: aiohttp.ClientSession) -> None:
    async with http.put("/v1/queues/q") as r:
        assert r.status == 201
    msgs = [
        {"body": "1", "group": "g", "dedup_id": "x1"},
        {"body": "2", "group": "g", "dedup_id": "x2"},
    ]
    async with http.post("/v2/queues/q/messages", json={"messages": msgs}) as r:
        ids = (await r.json())["ids"]
    async with http.post("/v2/queues/q/messages", json={"messages": msgs}) as r:
        assert (await r.json())["ids"] == ids
    async with http.post("/v2/queues/q/messages/receive", json={"max_messages": 10}) as r:
        got = (await r.json())["messages"]
    assert [(m["body"], m["group"]) for m in got] == [("1", "g")]
    for bad in ({"body": "a", "group": 5}, {"body": "a", "dedup_id": "x" * 129}):
        async with http.post("/v2/queues/q/messages", json={"messages": [bad]}) as r:
            assert r.status == 422


async def test_cancelled_enqueue_with_dedup_id_still_blocks_its_retry(node: Node) -> None:
    """A client that gives up (cancels) while its dedup'd write is in the store's
    hands must not let a retry store a second copy: the write finishes under the
    dedup lock, and the retry finds it."""
    await node.catalog.create_queue("dd")
    store = node.store
    real_write = store.write_batch
    writing = asyncio.Event()

    async def slow_write(ops: Any) -> list[bool]:
        # As the real store behaves: a write handed over completes even if its
        # caller is cancelled. This one takes 50 ms to land.
        async def land() -> list[bool]:
            await asyncio.sleep(0.05)
            return await real_write(ops)

        writing.set()
        return await asyncio.shield(asyncio.ensure_future(land()))

    store.write_batch = slow_write  # type: ignore[method-assign]
    first = asyncio.ensure_future(node.queues.enqueue("dd", [NewMessage(b"x", dedup_id="r1")]))
    await writing.wait()
    store.write_batch = real_write  # type: ignore[method-assign]
    first.cancel()
    (again,) = await node.queues.enqueue("dd", [NewMessage(b"x", dedup_id="r1")])
    await asyncio.sleep(0.1)  # the cancelled caller's write has landed by now
    msgs = await node.queues.receive("dd", 10)
    assert [m.id for m in msgs] == [again]


async def test_legacy_dedup_records_are_honoured_and_swept_past_any_backlog(
    node: Node, clock: ManualClock
) -> None:
    """Records of the one-key-per-id layout (earlier releases) still dedup, and the
    sweeper gets through any number of them (it once stopped after the first 100k)."""
    import msgpack

    from dynaq.storage.base import Put

    info = await node.catalog.create_queue("q")
    now = clock.wall_ms()
    (mid,) = await node.queues.enqueue("q", [NewMessage(b"x")])
    live = [Put(keys.dedup(info.number, "live"), msgpack.packb([mid, now + 60_000]))]
    stale = [
        Put(keys.dedup(info.number, f"s{i:06d}"), msgpack.packb([1, now - 1])) for i in range(2500)
    ]
    await node.store.write_batch(live + stale)
    assert await node.queues.enqueue("q", [NewMessage(b"y", dedup_id="live")]) == [mid]
    removed = 0
    for _ in range(5):  # rounds of at most 1000 records each move on from a cursor
        removed += await node.queues.upkeep.sweep_dedup(limit=1000)
    assert removed == 2500
    left = await node.store.scan(keys.DEDUP, prefix_end(keys.DEDUP), 10)
    assert [k for k, _ in left] == [keys.dedup(info.number, "live")]


async def test_group_order_holds_across_writers_whose_clocks_disagree(tmp_path: Any) -> None:
    """Regression (tests/faults, ring with skewed clocks): a group's message sent after
    another was acknowledged sorts after it, even through a writer whose clock is an
    hour behind the first one's (ids carry each writer's clock)."""
    from dynaq.storage.memory import MemoryStore
    from tests.fixtures.nodes import node_config

    store = MemoryStore()
    ahead, behind = ManualClock(), ManualClock()
    ahead.step_wall(3_600_000)
    nodes = [
        Node(node_config(tmp_path / name, node={"name": name}), clock=clock, store=store)
        for name, clock in (("ahead", ahead), ("behind", behind))
    ]
    for n in nodes:
        await n.start()
    try:
        first, second = nodes
        await first.catalog.create_queue("q")
        await second.catalog.reload()
        sent: list[int] = []
        for i in range(6):  # alternate writers, each send after the last was acknowledged
            writer = nodes[i % 2]
            sent += await writer.queues.enqueue("q", [NewMessage(b"%d" % i, group="g")])
        assert sent == sorted(sent), sent
        got: list[bytes] = []
        for _ in range(6):
            (m,) = await second.queues.receive("q", 10)
            got.append(m.body)
            await second.queues.delete("q", [m.id])
        assert got == [b"%d" % i for i in range(6)]
    finally:
        for n in nodes:
            await n.stop()


async def test_dedup_holds_across_writers_whose_clocks_disagree(tmp_path: Any) -> None:
    """Regression (tests/faults, ring with skewed clocks): on a store that expires
    dedup records itself (Cassandra's TTL), a retry through a node an hour ahead of
    the one that took the first copy is still a dedup hit (comparing the two
    clocks ended the window at once)."""
    from dynaq.storage.memory import MemoryStore
    from tests.fixtures.nodes import node_config

    class ExpiringStore(MemoryStore):
        def expires_itself(self, key: bytes) -> bool:
            return key.startswith(keys.DEDUP)

    store = ExpiringStore()
    ahead, behind = ManualClock(), ManualClock()
    ahead.step_wall(3_600_000)
    nodes = [
        Node(node_config(tmp_path / name, node={"name": name}), clock=clock, store=store)
        for name, clock in (("behind", behind), ("ahead", ahead))
    ]
    for n in nodes:
        await n.start()
    try:
        first, retry = nodes
        await first.catalog.create_queue("q")
        await retry.catalog.reload()
        (a,) = await first.queues.enqueue("q", [NewMessage(b"x", dedup_id="k")])
        (b,) = await retry.queues.enqueue("q", [NewMessage(b"x", dedup_id="k")])
        assert a == b
        assert await retry.queues.sweep_dedup() == 0  # the store expires them, not a sweep
    finally:
        for n in nodes:
            await n.stop()


async def test_a_group_message_landing_behind_the_scan_cursor_is_served_first(
    node: Node,
) -> None:
    """Regression (tests/faults, chaos soak on a Cassandra ring: 130 order violations):
    a group message whose id was drawn before, and committed after, larger ids in its
    lane that a scan had already passed was found only when the scan wrapped around,
    so its group's later message was served before it."""
    from dynaq.core.ids import group_lane

    await node.catalog.create_queue("q")
    info = await node.catalog.update_queue("q", {"max_partitions": 1})  # no split resets it
    writer = node.queues.writer
    lane = group_lane("a")
    late = await writer.prepare(info, [NewMessage(b"j", group="a")])  # id drawn, not written
    writer.ids._lane, writer.ids._left_in_lane = lane, 10_000  # plain messages: same lane
    await node.queues.enqueue("q", [NewMessage(b"p%d" % i) for i in range(3)])
    (first,) = await node.queues.receive("q", 1)  # the scan's cursor moves past j's id
    assert first.body == b"p0" and first.id > late.ids[0]
    await node.store.write_batch(late.ops)  # j lands late, behind the cursor
    writer.note_written(late)
    await node.queues.enqueue("q", [NewMessage(b"k", group="a")])
    bodies = [m.body for m in await node.queues.receive("q", 10)]
    assert b"j" in bodies and b"k" not in bodies, bodies  # k waits for j


async def test_a_blocked_group_backlog_costs_each_receive_a_bounded_walk(node: Node) -> None:
    """With a group head in flight, the rest of its backlog is skipped; a receive walks
    at most a bounded number of rows, and later receives go on from the cursor."""
    await node.catalog.create_queue("q")
    for _ in range(20):
        await node.queues.enqueue("q", [NewMessage(b"g", group="G") for _ in range(1000)])
    info = await node.catalog.queue("q")
    st = node.queues.states.state(info)
    (head,) = await node.queues.receive("q", 1)
    scans = 0
    real_scan = node.store.scan

    async def counting_scan(start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        nonlocal scans
        rows = await real_scan(start, end, limit)
        scans += len(rows)
        return rows

    node.store.scan = counting_scan  # type: ignore[method-assign]
    assert await node.queues.receive("q", 1) == []
    assert scans <= 8192 + 4096  # one bounded walk, not the 19,999-row backlog
    assert st.inflight.keys() == {head.id}


async def test_a_long_poll_goes_past_a_long_blocked_backlog_at_once(node: Node) -> None:
    await node.catalog.create_queue("q")
    for _ in range(20):
        await node.queues.enqueue("q", [NewMessage(b"g", group="G") for _ in range(1000)])
    (_head,) = await node.queues.receive("q", 1)
    await node.queues.enqueue("q", [NewMessage(b"free")])  # after the backlog
    got = await asyncio.wait_for(node.queues.receive("q", 1, wait_time_s=20), 5)
    assert [m.body for m in got] == [b"free"]


async def test_dedup_holds_while_the_wall_clock_steps_on_a_running_node(
    node: Node, clock: ManualClock
) -> None:
    """Regression (tests/faults, a running node's clock stepped 1 h back and ahead under
    load: 8 dedup violations): a retry sent just after a step looked in another time
    bucket, or found its record expired, and was stored again. A window is elapsed time."""
    await node.catalog.create_queue("q")
    for step_ms in (-3_600_000, 3_600_000, 3_600_000, -3_600_000):
        key = f"k{step_ms}-{clock.wall_ms()}"
        (a,) = await node.queues.enqueue("q", [NewMessage(b"x", dedup_id=key)])
        clock.step_wall(step_ms)
        (b,) = await node.queues.enqueue("q", [NewMessage(b"x", dedup_id=key)])
        assert a == b, step_ms
        assert await node.queues.sweep_dedup() == 0  # and the sweeper keeps the record
        (c,) = await node.queues.enqueue("q", [NewMessage(b"x", dedup_id=key)])
        assert c == a
    clock.advance(301)  # elapsed time still ends the window
    key = f"k-last-{clock.wall_ms()}"
    (a,) = await node.queues.enqueue("q", [NewMessage(b"x", dedup_id=key)])
    clock.advance(301)
    (b,) = await node.queues.enqueue("q", [NewMessage(b"x", dedup_id=key)])
    assert b != a


async def test_group_message_behind_the_scan_cursor_is_served_before_later_ones(
    node: Node,
) -> None:
    """A scan that read a lane before a group's first messages were committed
    (written through another node whose hint was lost in a slice change) leaves
    its cursor past them; the group's next message, written later above the
    cursor, must still wait for them."""
    info = await node.catalog.create_queue("q")
    a, b = (
        (await node.queues.enqueue("q", [NewMessage(b"1", group="g")]))[0],
        (await node.queues.enqueue("q", [NewMessage(b"2", group="g")]))[0],
    )
    st = node.queues.states.state(info)
    part = st.partition_of_lane(lane_of(a))
    assert part is not None
    part.cursor, part.rewind = b + 1, None  # a scan passed them; no hint arrived
    (c,) = await node.queues.enqueue("q", [NewMessage(b"3", group="g")])
    assert c > b + 1
    order: list[bytes] = []
    for _ in range(3):
        got = await node.queues.receive("q", 10)
        assert len(got) == 1, [m.body for m in got]
        order.append(got[0].body)
        await node.queues.delete("q", [got[0].id])
    assert order == [b"1", b"2", b"3"]


async def test_content_based_dedup_applies_to_every_send(node: Node) -> None:
    """A FIFO queue with content_based_dedup deduplicates sends without a dedup id by
    their body's SHA-256, through the service (v2, the client), not only SQS."""
    await node.catalog.create_queue("f", {"fifo": True, "content_based_dedup": True})
    (a,) = await node.queues.enqueue("f", [NewMessage(b"same", group="g")])
    (b,) = await node.queues.enqueue("f", [NewMessage(b"same", group="g")])
    (c,) = await node.queues.enqueue("f", [NewMessage(b"other", group="g")])
    (d,) = await node.queues.enqueue("f", [NewMessage(b"same", group="g", dedup_id="x")])
    assert a == b and len({a, c, d}) == 3
