"""The topic half of the catalog: topic config and subscriptions, stored and cached.

:class:`TopicCatalog` is a base class of :class:`~dynaq.services.catalog.Catalog`
(the queue half), so callers keep one object, ``Catalog``, for all config.

Guarantees:

* Each topic is one versioned record under its own key prefix; every change
  to it (subscribe, unsubscribe, history) is a read, modify and conditional
  put, retried on a version conflict, so concurrent changes never lose each
  other.
* A node applies its own changes to its cache at once, and before the change
  returns it tells its live peers (:data:`CatalogNews`, awaited), which re-read
  that one record at once; a peer that does not answer sees the change at its
  next sync (:meth:`TopicCatalog._scan_topics`), or when it asks with ``fresh``.
* An older read of a record never overwrites what a newer read or change of it
  cached (:class:`ReadOrder`): a sync that began before a change was announced
  does not bring the old config back.
* A subscription names a topic and a queue that both exist, as the store holds
  them, when it is made; subscribing and unsubscribing are idempotent.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from typing import Literal, TypeAlias

from dynaq.core import keys
from dynaq.errors import AlreadyExists, Conflict, QueueNotFound, TopicNotFound
from dynaq.services.queue_records import (
    QueueInfo,
    Subscription,
    TopicInfo,
    check_name,
    decode_topic,
    encode_topic,
)
from dynaq.services.record_locks import RecordLocks
from dynaq.storage.base import Store, prefix_end

CONFIG_RETRIES = 20
"""How often a conditional update of one config record is retried on a version conflict."""

NewsKind: TypeAlias = Literal["queue", "topic"]
"""What changed: a queue's record or a topic's (its subscriptions included)."""
QUEUE_NEWS: NewsKind = "queue"
TOPIC_NEWS: NewsKind = "topic"

CatalogNews: TypeAlias = Callable[[NewsKind, str], Awaitable[None]]
"""Tells the other live nodes that this node just changed one record, ``(kind, name)``,
so they re-read it now. Set by the node (:meth:`TopicCatalog.tell_peers_with`); it
must return within a short bound and never raise: a peer that does not hear it
catches up at its next config sync, and the change stands either way."""

__all__ = [
    "CONFIG_RETRIES",
    "QUEUE_NEWS",
    "TOPIC_NEWS",
    "CatalogNews",
    "NewsKind",
    "ReadOrder",
    "TopicCatalog",
]

_PRUNE_AT = 10_000  # records with a newest ticket kept while some read runs long


class ReadOrder:
    """Orders this node's reads and changes of config records, so an older read never
    overwrites what a newer read or change of the same record has cached.

    A read takes a ticket before it asks the store (:meth:`reading`) and may cache
    what it found only if :meth:`claim` says no read that began later, and no
    change of this node made later, has cached that record already. A full scan
    (a config sync) holds one ticket for all its records: a record re-read on a
    peer's news while the scan ran keeps that fresher view, whatever the scan saw.
    """

    def __init__(self) -> None:
        self._last = 0
        self._running: set[int] = set()
        self._newest: dict[tuple[str, str], int] = {}

    def changed(self, kind: NewsKind, name: str) -> None:
        """This node just wrote the record: what it cached of it now is newer than
        whatever a read begun before finds."""
        self._last += 1
        self._newest[kind, name] = self._last

    @contextlib.contextmanager
    def reading(self) -> Iterator[int]:
        """A ticket for one read (or one scan), held while it runs."""
        self._last += 1
        ticket = self._last
        self._running.add(ticket)
        try:
            yield ticket
        finally:
            self._running.discard(ticket)
            # A record's newest ticket only matters to reads still running that began
            # before it: with none running every entry is moot, else old ones are.
            if not self._running:
                self._newest.clear()
            elif len(self._newest) > _PRUNE_AT:
                floor = min(self._running)
                self._newest = {k: t for k, t in self._newest.items() if t > floor}

    def claim(self, kind: NewsKind, name: str, ticket: int) -> bool:
        """Whether what ``ticket``'s read found may be cached (it is the newest yet)."""
        if self._newest.get((kind, name), 0) > ticket:
            return False
        self._newest[kind, name] = ticket
        return True


class TopicCatalog(ABC):
    """Topic config, cached on this node; needs the queue half for :meth:`queue`."""

    def __init__(self, store: Store, *, read_through: bool = False) -> None:
        self._store = store
        self.read_through = read_through
        """Every lookup reads the record from the store (the cache only saves decoding
        an unchanged one): set where other processes change the store this node
        serves, and must be seen at once (a node's workers)."""
        self._topics: dict[str, TopicInfo] = {}
        self._topic_versions: dict[str, int] = {}
        self._records = RecordLocks()
        """This node's read-modify-write cycles, one at a time per record."""
        self._order = ReadOrder()
        self._news: CatalogNews | None = None

    def tell_peers_with(self, news: CatalogNews) -> None:
        """Await ``news(kind, name)`` after each change this node makes, before the
        change returns: every live peer that answers acts on it from then on."""
        self._news = news

    async def _announce(self, kind: NewsKind, name: str) -> None:
        # With read_through every peer (a worker of this node) reads the record at
        # each lookup anyway: news would only cost a round trip.
        if self._news is not None and not self.read_through:
            await self._news(kind, name)

    @abstractmethod
    async def queue(self, name: str, *, fresh: bool = False) -> QueueInfo:
        """The queue's config; :class:`~dynaq.errors.QueueNotFound` if there is none."""

    def _set_topic(self, name: str, info: TopicInfo | None, version: int | None = None) -> None:
        """Cache ``info`` (None: the topic is gone), stored with ``version`` if known."""
        if info is None:
            self._topics.pop(name, None)
            self._topic_versions.pop(name, None)
            return
        if version is not None:
            self._topic_versions[name] = version
        elif self._topics.get(name) != info:
            self._topic_versions.pop(name, None)
        self._topics[name] = info

    async def _scan_topics(self) -> None:
        """Read every topic from the store and cache what no newer read has cached."""
        with self._order.reading() as ticket:
            records = await self._scan_prefix(keys.CONFIG_TOPIC)
            found = {name: decode_topic(name, raw) for name, raw in records}
            for name in [n for n in self._topics if n not in found]:
                if self._order.claim(TOPIC_NEWS, name, ticket):
                    self._set_topic(name, None)
            for name, info in found.items():
                if self._order.claim(TOPIC_NEWS, name, ticket):
                    self._set_topic(name, info)

    async def _scan_prefix(self, prefix: bytes) -> list[tuple[str, bytes]]:
        """Every config record under ``prefix``: (name, encoded record)."""
        out: list[tuple[str, bytes]] = []
        start, end = prefix, prefix_end(prefix)
        while True:
            rows = await self._store.scan(start, end, 1000)
            out.extend((k[len(prefix) :].decode(), v) for k, v in rows)
            if len(rows) < 1000:
                return out
            start = rows[-1][0] + b"\x00"

    async def _unsubscribe_deleted(self, queue: str) -> None:
        """Remove the deleted ``queue`` from every topic in the store (read afresh): a
        delete cut short by a crash, between its tombstone and its unsubscribes, may
        have left it subscribed, and a queue created again under the name must not
        inherit the old one's subscriptions."""
        await self._scan_topics()
        await self._unsubscribe_everywhere(queue)

    async def _unsubscribe_everywhere(self, queue: str) -> None:
        """Remove a deleted ``queue`` from every topic this node knows it subscribed to."""
        for topic in list(self._topics.values()):
            if queue in topic.queues:
                with contextlib.suppress(TopicNotFound):
                    await self.unsubscribe(topic.name, queue)

    def topic_names(self) -> list[str]:
        return sorted(self._topics)

    async def listed_topic_names(self) -> list[str]:
        """The topics, for a listing: with :attr:`read_through`, as the store holds
        them now (another worker's topic just made is listed)."""
        if self.read_through:
            await self._scan_topics()
        return self.topic_names()

    async def topic(self, name: str, *, fresh: bool = False) -> TopicInfo:
        """The topic and its subscriptions: cached (current as of this node's last sync
        and the news of its live peers), or read from the store when ``fresh``."""
        info = self._topics.get(name)
        if info is not None and not fresh and not self.read_through:
            return info
        with self._order.reading() as ticket:
            item = await self._store.get(keys.topic_config(name))
            newest = self._order.claim(TOPIC_NEWS, name, ticket)
        info = self._topics.get(name)
        if not newest:
            # A read begun later (news, a sync) cached the record already: it stands.
            if info is None:
                raise TopicNotFound("Topic did not exist.")
            return info
        if item is None:
            self._set_topic(name, None)
            raise TopicNotFound("Topic did not exist.")
        if info is None or self._topic_versions.get(name) != item.version:
            info = decode_topic(name, item.value)
            self._set_topic(name, info, item.version)
        return info

    async def create_topic(self, name: str) -> TopicInfo:
        check_name("topic", name)
        info = TopicInfo(name, ())
        written = await self._store.put_if_absent(keys.topic_config(name), encode_topic(info))
        if written is None:
            raise AlreadyExists("Topic already exists.")
        self._order.changed(TOPIC_NEWS, name)
        self._set_topic(name, info, written)
        await self._announce(TOPIC_NEWS, name)
        return info

    async def delete_topic(self, name: str) -> None:
        deleted = await self._store.delete(keys.topic_config(name))
        self._order.changed(TOPIC_NEWS, name)
        self._set_topic(name, None)
        if not deleted:
            raise TopicNotFound("Topic did not exist.")
        await self._announce(TOPIC_NEWS, name)

    async def _update_topic(
        self, name: str, change: Callable[[TopicInfo], TopicInfo], missing: str
    ) -> TopicInfo:
        key = keys.topic_config(name)
        # This node's changes of one topic run one at a time (see RecordLocks): only
        # another node's write can make the conditional put below fail.
        async with self._records.serial(key):
            for _ in range(CONFIG_RETRIES):
                with self._order.reading() as ticket:
                    item = await self._store.get(key)
                    if item is None:
                        if self._order.claim(TOPIC_NEWS, name, ticket):
                            self._set_topic(name, None)
                        raise TopicNotFound(missing)
                updated = change(decode_topic(name, item.value))
                written = await self._store.put_if_version(key, encode_topic(updated), item.version)
                if written is not None:
                    self._order.changed(TOPIC_NEWS, name)
                    self._set_topic(name, updated, written)
                    break
            else:
                raise Conflict("topic changed concurrently; retry")
        # Outside the record's lock: this node's next change of the topic need not
        # wait for the peers' answers.
        await self._announce(TOPIC_NEWS, name)
        return updated

    async def set_topic_history(self, name: str, on: bool) -> TopicInfo:
        """Keep (or stop keeping) what is published to ``name`` as a stream."""
        return await self._update_topic(
            name, lambda t: replace(t, history=on), "Topic does not exist. Please create it first."
        )

    async def subscribe(
        self, topic: str, queue: str, options: Subscription | None = None
    ) -> TopicInfo:
        """Subscribe ``queue`` to ``topic`` with ``options`` (idempotent; a subscription
        that exists takes the new options, None meaning every message, raw).

        Both are checked in the store, not this node's cache: a queue deleted through
        another node a moment ago must not be subscribed (the topic would list it
        for good)."""
        try:
            await self.topic(topic, fresh=True)
        except TopicNotFound:
            raise TopicNotFound("Topic does not exist. Please create it first.") from None
        try:
            await self.queue(queue, fresh=True)
        except QueueNotFound:
            raise QueueNotFound("Queue does not exist. Please create it first") from None

        def add(t: TopicInfo) -> TopicInfo:
            queues = t.queues if queue in t.queues else (*t.queues, queue)
            subs = {q: o for q, o in t.subscriptions.items() if q != queue}
            if options is not None:
                subs[queue] = options
            return replace(t, queues=queues, subscriptions=subs)

        return await self._update_topic(topic, add, "Topic does not exist. Please create it first.")

    async def unsubscribe(self, topic: str, queue: str) -> TopicInfo:
        """Remove ``queue`` from ``topic``'s subscribers (idempotent)."""

        def remove(t: TopicInfo) -> TopicInfo:
            subs = {q: o for q, o in t.subscriptions.items() if q != queue}
            return replace(t, queues=tuple(q for q in t.queues if q != queue), subscriptions=subs)

        return await self._update_topic(topic, remove, "Topic did not exist.")
