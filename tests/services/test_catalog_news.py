"""Catalog news, on catalogs sharing one store (two nodes of a ring, without HTTP):
every change is announced before it returns, a record re-read on news is never
overwritten by an older read or sync, and a subscription is checked in the store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from dynaq.clock import ManualClock
from dynaq.config.sections import QueueDefaults
from dynaq.core import keys
from dynaq.errors import QueueNotFound, TopicNotFound
from dynaq.services.catalog import Catalog
from dynaq.services.catalog_topics import NewsKind
from dynaq.storage.base import Item
from dynaq.storage.memory import MemoryStore


class GatedStore(MemoryStore):
    """A memory store whose scans of one prefix (or reads of one key) answer what they
    found only once :attr:`gate` opens: an older read still in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.gated_scan: bytes | None = None
        self.gated_key: bytes | None = None
        self.waiting = asyncio.Event()

    async def _hold(self) -> None:
        if self.gate is not None:
            self.waiting.set()
            await self.gate.wait()

    async def scan(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        rows = await super().scan(start, end, limit)
        if start == self.gated_scan:
            await self._hold()
        return rows

    async def get(self, key: bytes) -> Item | None:
        item = await super().get(key)
        if key == self.gated_key:
            await self._hold()
        return item


def _catalog(store: MemoryStore, clock: ManualClock, **kw: bool) -> Catalog:
    return Catalog(store, clock, QueueDefaults(), cache_ttl_s=30.0, **kw)


async def _held(store: GatedStore, task: asyncio.Task[object]) -> None:
    """Wait until ``task``'s read has its answer and is held at the gate."""
    await asyncio.wait_for(store.waiting.wait(), 5)
    assert not task.done()


async def test_every_change_is_announced_before_it_returns() -> None:
    told: list[tuple[str, str]] = []
    store = MemoryStore()
    catalog = _catalog(store, ManualClock())

    async def news(kind: NewsKind, name: str) -> None:
        await asyncio.sleep(0)  # awaited: the change waits for it
        told.append((kind, name))

    catalog.tell_peers_with(news)

    async def changes() -> Sequence[tuple[str, str]]:
        await catalog.create_queue("q")
        await catalog.update_queue("q", {"visibility_timeout_s": 7})
        await catalog.create_topic("t")
        await catalog.subscribe("t", "q")
        await catalog.set_topic_history("t", True)
        await catalog.unsubscribe("t", "q")
        await catalog.subscribe("t", "q")
        await catalog.delete_queue("q")  # the queue, then each topic it leaves
        await catalog.delete_topic("t")
        return list(told)

    assert await changes() == [
        ("queue", "q"),
        ("queue", "q"),
        ("topic", "t"),
        ("topic", "t"),
        ("topic", "t"),
        ("topic", "t"),
        ("topic", "t"),
        ("queue", "q"),
        ("topic", "t"),
        ("topic", "t"),
    ]


async def test_a_node_of_workers_sends_no_news() -> None:
    """Workers read every record at each lookup (read_through): news would be waste."""
    told: list[tuple[str, str]] = []
    catalog = _catalog(MemoryStore(), ManualClock(), read_through=True)

    async def news(kind: NewsKind, name: str) -> None:
        told.append((kind, name))

    catalog.tell_peers_with(news)
    await catalog.create_queue("q")
    await catalog.create_topic("t")
    assert told == []


async def test_a_sync_begun_before_a_delete_does_not_bring_the_queue_back() -> None:
    store, clock = GatedStore(), ManualClock()
    one, two = _catalog(store, clock), _catalog(store, clock)
    await one.create_queue("q")
    await two.reload()
    assert two.cached_queue("q") is not None
    store.gated_scan = keys.CONFIG_QUEUE
    store.gate = asyncio.Event()
    sync = asyncio.create_task(two.reload())
    await _held(store, sync)  # the scan saw q
    await one.delete_queue("q")
    with pytest.raises(QueueNotFound):
        await two.queue("q", fresh=True)  # the news of the delete
    store.gate.set()
    await sync
    assert two.cached_queue("q") is None
    assert "q" not in two.queue_names()
    with pytest.raises(QueueNotFound):
        await two.queue("q")


async def test_a_sync_begun_before_a_change_keeps_the_topic_as_the_news_read_it() -> None:
    store, clock = GatedStore(), ManualClock()
    one, two = _catalog(store, clock), _catalog(store, clock)
    await one.create_queue("q")
    await one.create_topic("t")
    await one.subscribe("t", "q")
    await one.create_topic("gone")
    await two.reload()
    store.gated_scan = keys.CONFIG_TOPIC
    store.gate = asyncio.Event()
    sync = asyncio.create_task(two.reload())
    await _held(store, sync)  # the scan saw t with q, and gone, but not new
    await one.unsubscribe("t", "q")
    await one.delete_topic("gone")
    await one.create_topic("new")
    for name in ("t", "new"):
        await two.topic(name, fresh=True)
    with pytest.raises(TopicNotFound):
        await two.topic("gone", fresh=True)
    store.gate.set()
    await sync
    assert (await two.topic("t")).queues == ()
    assert two.topic_names() == ["new", "t"]


async def test_an_older_read_does_not_override_the_news() -> None:
    """A lookup that read the live queue just before the delete answers after the
    news was applied: it must not cache the deleted queue again."""
    store, clock = GatedStore(), ManualClock()
    one, two = _catalog(store, clock), _catalog(store, clock)
    await one.create_queue("q")
    store.gated_key = keys.queue_config("q")
    store.gate = held = asyncio.Event()
    lookup = asyncio.create_task(two.queue("q"))
    await _held(store, lookup)  # it read the live record
    store.gate = None
    await one.delete_queue("q")
    with pytest.raises(QueueNotFound):
        await two.queue("q", fresh=True)
    held.set()
    with pytest.raises(QueueNotFound):
        await lookup
    assert two.cached_queue("q") is None


async def test_subscribe_checks_the_queue_in_the_store() -> None:
    """A queue deleted through another node (whose news this node missed) is not
    subscribed, however fresh this node's cache entry."""
    store, clock = MemoryStore(), ManualClock()
    one, two = _catalog(store, clock), _catalog(store, clock)
    await one.create_queue("q")
    await one.create_topic("t")
    await two.queue("q")
    await two.topic("t")
    await one.delete_queue("q")
    with pytest.raises(QueueNotFound):
        await two.subscribe("t", "q")
    assert (await one.topic("t", fresh=True)).queues == ()


async def test_news_marks_the_record_stale_before_any_re_read() -> None:
    """The route marks the cached record stale at once (the sender may stop waiting
    for a slow re-read): the next lookup reads the store, whatever it finds there."""
    store, clock = MemoryStore(), ManualClock()
    one, two = _catalog(store, clock), _catalog(store, clock)
    await one.create_queue("q")
    await one.create_topic("t")
    await two.queue("q")
    await two.topic("t")
    await one.delete_queue("q")
    await one.delete_topic("t")
    assert (await two.queue("q")).name == "q"  # cached: no news told yet
    two.mark_stale("queue", "q")
    two.mark_stale("topic", "t")
    with pytest.raises(QueueNotFound):
        await two.queue("q")
    with pytest.raises(TopicNotFound):
        await two.topic("t")
    with pytest.raises(QueueNotFound):
        await two.queue("fresh")  # negative-cached now
    await one.create_queue("fresh")
    two.mark_stale("queue", "fresh")
    assert (await two.queue("fresh")).name == "fresh"  # not the negative cache
