"""The relay's pipeline: the next batch marked while one is published, message ids, lane reads."""

from __future__ import annotations

import asyncio
import inspect
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from dynaq.core.messages import NewMessage
from dynaq.node import Node
from dynaq.outbox.barriers import KeyBarriers
from dynaq.outbox.relay import OutboxRelay
from dynaq.outbox.schema import OutboxRecord, draw_message_ids, stash
from dynaq.services.topics import TopicService
from dynaq.storage.base import Put, Store
from dynaq.storage.embedded import LmdbStore
from dynaq.storage.memory import MemoryStore
from tests.outbox.helpers import RecordingMetrics, consume, fast_config, outbox_pool

asyncpg = pytest.importorskip("asyncpg")

if TYPE_CHECKING:
    from asyncpg import Pool


@pytest.fixture
async def db(pg_dsn: str) -> AsyncIterator[Pool]:
    async with outbox_pool(pg_dsn, min_size=1, max_size=4) as pool:
        yield pool


class GatedPublisher:
    """The real topic service, but every publish waits until ``gate`` is open."""

    def __init__(self, topics: TopicService) -> None:
        self._topics = topics
        self.gate = asyncio.Event()
        self.waiting = 0
        self.message_ids: list[str] = []

    async def publish(
        self,
        topic: str,
        messages: Sequence[NewMessage],
        *,
        message_ids: Sequence[str] | None = None,
    ) -> dict[str, list[int]]:
        assert message_ids is not None and len(message_ids) == len(messages)
        self.message_ids.extend(message_ids)
        self.waiting += 1
        try:
            await self.gate.wait()
        finally:
            self.waiting -= 1
        return await self._topics.publish(topic, messages, message_ids=message_ids)


async def _eventually(pred: Callable[[], bool | Awaitable[bool]], timeout_s: float = 20.0) -> None:
    end = time.monotonic() + timeout_s
    while True:
        got = pred()
        if inspect.isawaitable(got):
            got = await got
        if got:
            return
        assert time.monotonic() < end, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_next_batch_is_marked_while_the_previous_one_is_published(
    node: Node, db: Pool, pg_dsn: str
) -> None:
    """With mark batch = in-flight bound, the second batch is escrowed while the
    first is being published (not after it is purged), nothing beyond the bound
    is in flight, no more than one batch is marked ahead, and every row still
    arrives once, in id order per key."""
    await node.catalog.create_queue("q")
    await node.catalog.create_topic("events")
    await node.catalog.subscribe("events", "q")
    async with db.acquire() as conn:
        for i in range(40):  # 20 keys, two rows each: ids 1..20, then 21..40
            await stash(conn, "events", f"k{i % 20}", f"k{i % 20}:{i // 20}".encode())
    publisher = GatedPublisher(node.topics)
    cfg = fast_config(pg_dsn, mark_batch=10, max_in_flight=10)
    relay = OutboxRelay(cfg, publisher, node.view, RecordingMetrics())

    async def marked_by_this_term(n: int) -> bool:
        sql = "SELECT count(*) FROM outbox WHERE leader_id = $1"
        return int(await db.fetchval(sql, relay.leader_id)) == n

    await relay.start()
    try:
        await _eventually(lambda: publisher.waiting == 1)
        assert relay.in_flight_records == 10
        await _eventually(lambda: marked_by_this_term(20))
        await asyncio.sleep(0.3)  # the marker holds its batch: no third one
        assert await marked_by_this_term(20)
        assert relay.in_flight_records == 10 and publisher.waiting == 1
        publisher.gate.set()
        seen = await consume(node.queues, "q", 40, timeout_s=30)
        await _eventually(lambda: relay.relayed == 40)
    finally:
        await relay.stop()
    assert seen == {f"k{k}": [0, 1] for k in range(20)}
    assert int(await db.fetchval("SELECT count(*) FROM outbox")) == 0
    assert len(set(publisher.message_ids)) == len(publisher.message_ids) == 40


async def test_a_busy_key_holds_back_only_its_own_rows(node: Node, db: Pool, pg_dsn: str) -> None:
    """A row whose key has a record in flight waits behind that key alone: the
    rows after it, of other keys, are dispatched at once (goharvest's marker
    stops there and holds back the whole rest of its batch), and the held row
    still arrives after its key's earlier one."""
    await node.catalog.create_queue("q")
    await node.catalog.create_topic("events")
    await node.catalog.subscribe("events", "q")
    keys = [f"k{i}" for i in range(10)] + ["k0"] + [f"k{i}" for i in range(10, 19)]
    async with db.acquire() as conn:
        for n, key in enumerate(keys):
            await stash(conn, "events", key, f"{key}:{keys[:n].count(key)}".encode())
    publisher = GatedPublisher(node.topics)
    cfg = fast_config(pg_dsn, mark_batch=10, max_in_flight=100)
    relay = OutboxRelay(cfg, publisher, node.view, RecordingMetrics())
    await relay.start()
    try:
        await _eventually(lambda: publisher.waiting == 1 and relay.in_flight_records == 19)
        await asyncio.sleep(0.2)
        assert relay.in_flight_records == 19  # the second k0 row waits, alone
        publisher.gate.set()
        seen = await consume(node.queues, "q", 20, timeout_s=30)
        await _eventually(lambda: relay.relayed == 20)
    finally:
        await relay.stop()
    assert seen == {"k0": [0, 1], **{f"k{k}": [0] for k in range(1, 19)}}
    assert int(await db.fetchval("SELECT count(*) FROM outbox")) == 0


def test_key_barriers_hand_a_key_to_its_held_rows_in_order() -> None:
    bars: KeyBarriers[str] = KeyBarriers()
    lead = uuid.uuid4()
    a1, a2, a3, b1 = (OutboxRecord(i, "t", k, b"", "{}", lead) for i, k in enumerate("aaab", 1))
    bars.take(a1)
    assert bars.busy("a") and not bars.busy("b")
    bars.hold(a2, "second")
    bars.hold(a3, "third")
    bars.take(b1)
    assert bars.held == 2 and set(bars.in_flight) == {1, 4}
    assert bars.release(a1) and bars.busy("a")  # freed, but a2 and a3 still wait
    assert bars.next_held("a") == (a2, "second")
    bars.take(a2)
    assert not bars.release(a1)  # a key is freed once, by the record holding it
    bars.forget_held(a3)  # its earlier copy was published: it goes nowhere
    assert bars.held == 0 and bars.next_held("a") is None
    assert bars.release(a2) and not bars.busy("a")
    bars.hold(b1, "again")
    bars.clear_held()
    assert bars.held == 0 and bars.next_held("b") is None


def test_drawn_message_ids_are_distinct_version_4_uuids() -> None:
    ids = draw_message_ids(500)
    assert len(set(ids)) == 500
    for text in ids:
        parsed = uuid.UUID(text)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert str(parsed) == text
    assert draw_message_ids(0) == []


@pytest.mark.parametrize("kind", ["lmdb", "memory"])
async def test_last_keys_answers_like_last_key(kind: str, tmp_path: Path) -> None:
    """The batched lane read behind every grouped publish (LMDB: one read
    transaction) gives what one ``last_key`` per range gives."""
    store: Store = (
        LmdbStore(tmp_path / "lmdb", map_size=64 * 1024**2) if kind == "lmdb" else MemoryStore()
    )
    await store.open()
    try:
        rng = random.Random(3)
        keys = sorted({bytes([rng.randrange(1, 255), rng.randrange(256)]) for _ in range(300)})
        await store.write_batch([Put(k, b"v") for k in keys])
        bounds = [b"", b"\x00", b"\x01", b"\x80", b"\xff", b"\xff\xff", b"\xff\xff\xff"]
        bounds += [bytes([rng.randrange(256), rng.randrange(256)]) for _ in range(60)]
        ranges = [(rng.choice(bounds), rng.choice(bounds)) for _ in range(200)]
        ranges += [(k, k + b"\x00") for k in keys[:20]]  # a one-key range
        expected = [await store.last_key(s, e) for s, e in ranges]
        assert await store.last_keys(ranges) == expected
        assert any(x is not None for x in expected) and None in expected
        assert await store.last_keys([]) == []
    finally:
        await store.close()
