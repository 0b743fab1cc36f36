"""The topic half of the catalog: topic config and subscriptions, stored and cached.

:class:`TopicCatalog` is a base class of :class:`~dynaq.services.catalog.Catalog`
(the queue half), so callers keep one object, ``Catalog``, for all config.

Guarantees:

* Each topic is one versioned record under its own key prefix; every change
  to it (subscribe, unsubscribe, history) is a read, modify and conditional
  put, retried on a version conflict, so concurrent changes never lose each
  other.
* A node applies its own changes to its cache at once; other nodes see them
  at their next sync (:meth:`TopicCatalog._cache_topics`), or at once when
  they ask with ``fresh``.
* A subscription names a topic and a queue that both exist when it is made;
  subscribing and unsubscribing are idempotent.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import replace

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
from dynaq.storage.base import Store

CONFIG_RETRIES = 20
"""How often a conditional update of one config record is retried on a version conflict."""

__all__ = ["CONFIG_RETRIES", "TopicCatalog"]


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

    @abstractmethod
    async def queue(self, name: str, *, fresh: bool = False) -> QueueInfo:
        """The queue's config; :class:`~dynaq.errors.QueueNotFound` if there is none."""

    def _cache_topics(self, records: Iterable[tuple[str, bytes]]) -> None:
        """Replace the cached topics by ``records`` (name, stored value) of a full scan."""
        self._topics = {name: decode_topic(name, raw) for name, raw in records}
        self._topic_versions.clear()

    @abstractmethod
    async def _scan_prefix(self, prefix: bytes) -> list[tuple[str, bytes]]:
        """Every config record under ``prefix``: (name, encoded record)."""

    async def _unsubscribe_deleted(self, queue: str) -> None:
        """Remove the deleted ``queue`` from every topic in the store (read afresh): a
        delete cut short by a crash, between its tombstone and its unsubscribes, may
        have left it subscribed, and a queue created again under the name must not
        inherit the old one's subscriptions."""
        self._cache_topics(await self._scan_prefix(keys.CONFIG_TOPIC))
        await self._unsubscribe_everywhere(queue)

    async def _unsubscribe_everywhere(self, queue: str) -> None:
        """Remove a deleted ``queue`` from every topic this node knows it subscribed to."""
        for topic in list(self._topics.values()):
            if queue in topic.queues:
                with contextlib.suppress(TopicNotFound):
                    await self.unsubscribe(topic.name, queue)

    def topic_names(self) -> list[str]:
        return sorted(self._topics)

    async def topic(self, name: str, *, fresh: bool = False) -> TopicInfo:
        """The topic and its subscriptions: cached (current within one config sync),
        or read from the store when ``fresh``."""
        info = self._topics.get(name)
        if info is not None and not fresh and not self.read_through:
            return info
        item = await self._store.get(keys.topic_config(name))
        if item is None:
            self._topics.pop(name, None)
            raise TopicNotFound("Topic did not exist.")
        if info is not None and self._topic_versions.get(name) == item.version:
            return info
        info = decode_topic(name, item.value)
        self._topics[name] = info
        self._topic_versions[name] = item.version
        return info

    async def create_topic(self, name: str) -> TopicInfo:
        check_name("topic", name)
        info = TopicInfo(name, ())
        written = await self._store.put_if_absent(keys.topic_config(name), encode_topic(info))
        if written is None:
            raise AlreadyExists("Topic already exists.")
        self._topics[name] = info
        self._topic_versions[name] = written
        return info

    async def delete_topic(self, name: str) -> None:
        self._topic_versions.pop(name, None)
        if not await self._store.delete(keys.topic_config(name)):
            self._topics.pop(name, None)
            raise TopicNotFound("Topic did not exist.")
        self._topics.pop(name, None)

    async def _update_topic(
        self, name: str, change: Callable[[TopicInfo], TopicInfo], missing: str
    ) -> TopicInfo:
        key = keys.topic_config(name)
        # This node's changes of one topic run one at a time (see RecordLocks): only
        # another node's write can make the conditional put below fail.
        async with self._records.serial(key):
            for _ in range(CONFIG_RETRIES):
                item = await self._store.get(key)
                if item is None:
                    self._topics.pop(name, None)
                    raise TopicNotFound(missing)
                updated = change(decode_topic(name, item.value))
                written = await self._store.put_if_version(key, encode_topic(updated), item.version)
                if written is not None:
                    self._topics[name] = updated
                    self._topic_versions[name] = written
                    return updated
        raise Conflict("topic changed concurrently; retry")

    async def set_topic_history(self, name: str, on: bool) -> TopicInfo:
        """Keep (or stop keeping) what is published to ``name`` as a stream."""
        return await self._update_topic(
            name, lambda t: replace(t, history=on), "Topic does not exist. Please create it first."
        )

    async def subscribe(
        self, topic: str, queue: str, options: Subscription | None = None
    ) -> TopicInfo:
        """Subscribe ``queue`` to ``topic`` with ``options`` (idempotent; a subscription
        that exists takes the new options, None meaning every message, raw)."""
        if topic not in self._topics and await self._store.get(keys.topic_config(topic)) is None:
            raise TopicNotFound("Topic does not exist. Please create it first.")
        try:
            await self.queue(queue)
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
