"""The catalog: queue and topic configuration, stored in the store and cached.

This module is the queue half and the one object callers use, :class:`Catalog`;
the topic half, which it inherits, is :mod:`dynaq.services.catalog_topics`.

Config lives under its own key prefix, one versioned record per queue or
topic, so a node reloads everything cheaply every sync interval and
concurrent PATCHes never lose each other (each update is a read, modify and
conditional put, retried on a version conflict). A node runs its own cycles
on one record one at a time, so only other nodes' writes can make one retry;
a new queue's number is claimed the same way, on one counter record, with a
jittered backoff between attempts. A node applies its own changes to its
cache at once and, before a change returns, tells its live peers, which
re-read that record at once (a peer that does not answer within about a
second sees it at its next sync). A cache miss reads through to the store
(with a short negative cache), so a queue made on another node is usable even
without the news, while unknown names cannot make a node hammer the store.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from dynaq.clock import Clock
from dynaq.config import QueueDefaults
from dynaq.core import keys
from dynaq.errors import AlreadyExists, Conflict, InvalidInput, QueueNotFound
from dynaq.services.catalog_topics import CONFIG_RETRIES, QUEUE_NEWS, NewsKind, TopicCatalog
from dynaq.services.queue_numbers import NUMBER_ATTEMPTS as NUMBER_ATTEMPTS
from dynaq.services.queue_numbers import claim_queue_number
from dynaq.services.queue_records import (
    QueueInfo,
    QueueSettings,
    Tombstone,
    TopicInfo,
    apply_settings,
    check_name,
    decode_queue_record,
    encode_queue,
    encode_tombstone,
)
from dynaq.storage.base import Store

_NEGATIVE_CACHE_S = 1.0


__all__ = ["Catalog", "QueueInfo", "QueueSettings", "Tombstone", "TopicInfo", "check_name"]

log = logging.getLogger(__name__)


class Catalog(TopicCatalog):
    """Queue and topic config, cached on this node.

    A cached queue is trusted for ``cache_ttl_s`` (the sync interval; a change
    through a live peer is re-read here at once, on its news); after that its
    next use reads through to the store, so a node that missed the news and
    whose sync loop is failing still never serves a queue deleted elsewhere for
    long. A deleted queue's name can be created again only after
    ``recreate_after_s``: by then every node has dropped the old queue from
    its cache, so no node can still be writing into the old queue's number.
    """

    def __init__(
        self,
        store: Store,
        clock: Clock,
        defaults: QueueDefaults,
        *,
        cache_ttl_s: float = 30.0,
        recreate_after_s: float | None = None,
        read_through: bool = False,
    ) -> None:
        super().__init__(store, read_through=read_through)
        self._clock = clock
        self._defaults = defaults
        self._ttl_s = cache_ttl_s
        self.recreate_after_s = (
            2 * cache_ttl_s + 1 if recreate_after_s is None else recreate_after_s
        )
        self._queues: dict[str, QueueInfo] = {}
        self._queue_versions: dict[str, int] = {}
        self._loaded: dict[str, float] = {}
        self._missing: dict[bytes, float] = {}
        self._queue_listeners: list[Callable[[QueueInfo | None, QueueInfo | None], None]] = []
        self._delete_listeners: list[Callable[[Tombstone], None]] = []
        self.tombstones: dict[str, Tombstone] = {}
        """Deleted queues whose messages may not be purged yet (from the last reload)."""
        self._rng = random.Random()

    def on_queue_change(self, fn: Callable[[QueueInfo | None, QueueInfo | None], None]) -> None:
        """Call ``fn(old, new)`` whenever a queue appears, changes or disappears here."""
        self._queue_listeners.append(fn)

    def on_queue_deleted(self, fn: Callable[[Tombstone], None]) -> None:
        """Call ``fn`` when this node deleted a queue (its messages must be purged)."""
        self._delete_listeners.append(fn)

    def _set_queue(self, name: str, new: QueueInfo | None) -> None:
        old = self._queues.get(name)
        if new is not None:
            self._loaded[name] = self._clock.monotonic()
        if old == new:
            return
        self._queue_versions.pop(name, None)
        if new is None:
            self._queues.pop(name, None)
            self._loaded.pop(name, None)
        else:
            self._queues[name] = new
            self._missing.pop(keys.queue_config(name), None)
        for fn in self._queue_listeners:
            fn(old, new)

    # sync --------------------------------------------------------------

    async def reload(self) -> None:
        """Read every queue and topic from the store and apply differences.

        A record read or changed here after this scan began (created, deleted,
        read through, or re-read on a peer's news) keeps that view: the scan is
        older than it (see :class:`~dynaq.services.catalog_topics.ReadOrder`).
        """
        queues: dict[str, QueueInfo] = {}
        tombstones: dict[str, Tombstone] = {}
        with self._order.reading() as ticket:
            for name, raw in await self._scan_prefix(keys.CONFIG_QUEUE):
                record = decode_queue_record(name, raw, self._defaults)
                if isinstance(record, Tombstone):
                    tombstones[name] = record
                else:
                    queues[name] = record
            self.tombstones = {n: t for n, t in tombstones.items() if not t.purged}
            for name in [n for n in self._queues if n not in queues]:
                if self._order.claim(QUEUE_NEWS, name, ticket):
                    self._set_queue(name, None)
            for name, info in queues.items():
                if self._order.claim(QUEUE_NEWS, name, ticket):
                    self._set_queue(name, info)
        await self._scan_topics()

    # queues --------------------------------------------------------------

    def queue_names(self) -> list[str]:
        """The queues this node knows (as of its last sync, or its own changes)."""
        return sorted(self._queues)

    async def listed_queue_names(self) -> list[str]:
        """The queues, for a listing: with :attr:`read_through`, as the store holds
        them now (another worker's queue just made is listed)."""
        if self.read_through:
            await self.reload()
        return self.queue_names()

    def cached_queue(self, name: str) -> QueueInfo | None:
        return self._queues.get(name)

    def cached_queues(self) -> list[QueueInfo]:
        """Every queue this node knows, as last loaded."""
        return list(self._queues.values())

    async def queue_or_none(self, name: str) -> QueueInfo | None:
        """The queue's config, or None if it does not exist."""
        try:
            return await self.queue(name)
        except QueueNotFound:
            return None

    async def dead_letter_sources(self, name: str) -> list[str]:
        """The queues whose redrive policy names ``name`` (as of this node's last sync;
        with :attr:`read_through`, as the store holds them now)."""
        if self.read_through:
            await self.reload()
        return [
            q.name
            for q in sorted(self._queues.values(), key=lambda q: q.name)
            if q.settings.redrive_policy is not None
            and q.settings.redrive_policy.dead_letter_queue == name
        ]

    def mark_stale(self, kind: NewsKind, name: str) -> None:
        """A peer changed this record: from now on a lookup reads it from the store,
        however long the re-read the news asks for takes on a loaded store."""
        self._order.changed(kind, name)  # no read begun before lands over this
        if kind == QUEUE_NEWS:
            self._loaded[name] = float("-inf")
            self._missing.pop(keys.queue_config(name), None)
        else:
            self._topics.pop(name, None)

    async def queue(self, name: str, *, fresh: bool = False) -> QueueInfo:
        """The queue's config; reads through to the store on a cache miss or an expired
        entry, and always when ``fresh``."""
        info = self._queues.get(name)
        now = self._clock.monotonic()
        cached = not fresh and not self.read_through
        if cached and info is not None and now - self._loaded.get(name, now) < self._ttl_s:
            return info
        key = keys.queue_config(name)
        if cached and info is None and self._missing.get(key, -1.0) > now:
            raise QueueNotFound("Queue did not exist.")
        with self._order.reading() as ticket:
            item = await self._store.get(key)
            newest = self._order.claim(QUEUE_NEWS, name, ticket)
        info = self._queues.get(name)
        if not newest:
            # A later read (news, a sync) or change cached the record: it stands.
            if info is None:
                raise QueueNotFound("Queue did not exist.")
            return info
        if item is not None and info is not None and self._queue_versions.get(name) == item.version:
            self._loaded[name] = self._clock.monotonic()
            return info
        record = None if item is None else decode_queue_record(name, item.value, self._defaults)
        if item is None or not isinstance(record, QueueInfo):
            self._set_queue(name, None)
            self._missing[key] = now + _NEGATIVE_CACHE_S
            if len(self._missing) > 10_000:
                self._missing.clear()
            raise QueueNotFound("Queue did not exist.")
        self._set_queue(name, record)
        self._queue_versions[name] = item.version
        return record

    async def _next_queue_number(self, name: str) -> int:
        return await claim_queue_number(self._store, self._clock, self._records, self._rng, name)

    async def create_queue(self, name: str, settings: Mapping[str, Any] | None = None) -> QueueInfo:
        """Create a queue with the defaults and ``settings`` (setting name → typed
        value) applied; :class:`AlreadyExists` if it exists.

        The queue's first record already holds its settings: no node, and no
        sender through any node, ever sees it with defaults it was not created
        with (a FIFO queue seen as a standard one would take a group message
        without its group or dedup id). Over a tombstone younger than
        ``recreate_after_s`` this is a 409 that says when to retry (SQS asks for
        60 s between a delete and a re-create).
        """
        check_name("queue", name)
        initial = QueueSettings.defaults(self._defaults)
        if settings:
            await self._check_redrive(name, settings, bool(settings.get("fifo", False)))
            initial = apply_settings(initial, settings)
        key = keys.queue_config(name)
        # The store decides, not this node's cache: another node (or worker) may
        # have deleted the queue a moment ago (then the answer is the 409 below).
        item = await self._store.get(key)
        record = None if item is None else decode_queue_record(name, item.value, self._defaults)
        if isinstance(record, QueueInfo):
            raise AlreadyExists("Queue already exists.")
        if isinstance(record, Tombstone):
            wait_ms = record.deleted_ms + int(self.recreate_after_s * 1000) - self._clock.wall_ms()
            if wait_ms > 0:
                raise Conflict(
                    f"queue {name!r} was deleted moments ago; it can be created again "
                    f"in {wait_ms / 1000:.0f} s"
                )
        if isinstance(record, Tombstone):
            await self._unsubscribe_deleted(name)
        number = await self._next_queue_number(name)
        info = QueueInfo(name, number, initial, self._clock.wall_ms())
        if item is None:
            written = await self._store.put_if_absent(key, encode_queue(info))
        else:
            written = await self._store.put_if_version(key, encode_queue(info), item.version)
        if written is None:
            raise AlreadyExists("Queue already exists.")
        if isinstance(record, Tombstone) and not record.purged:
            # The old number's purge must still run: hand it to the purgers.
            for fn in self._delete_listeners:
                fn(record)
        self._order.changed(QUEUE_NEWS, name)
        self._set_queue(name, info)
        log.info("queue created", extra={"queue": name, "number": number})
        await self._announce(QUEUE_NEWS, name)
        return info

    async def _read_live(self, name: str) -> tuple[QueueInfo, int]:
        """The live queue record and its version; :class:`QueueNotFound` if there is none."""
        with self._order.reading() as ticket:
            item = await self._store.get(keys.queue_config(name))
            record = None if item is None else decode_queue_record(name, item.value, self._defaults)
            if item is None or not isinstance(record, QueueInfo):
                if self._order.claim(QUEUE_NEWS, name, ticket):
                    self._set_queue(name, None)
                raise QueueNotFound("Queue did not exist.")
        return record, item.version

    async def update_queue(self, name: str, changes: Mapping[str, Any]) -> QueueInfo:
        """Apply settings changes (setting name → typed value) with a conditional put,
        retrying on conflicts.

        A redrive policy must name another queue that exists now (422 otherwise);
        if that queue is deleted later, messages stay in their queue (see
        :mod:`dynaq.services.queues.dead_letters`).
        """
        key = keys.queue_config(name)
        if changes.get("redrive_policy") is not None:
            current, _ = await self._read_live(name)
            await self._check_redrive(name, changes, current.settings.fifo)
        async with self._records.serial(key):
            for _ in range(CONFIG_RETRIES):
                record, version = await self._read_live(name)
                if changes.get("fifo", record.settings.fifo) != record.settings.fifo:
                    raise InvalidInput("fifo is set when a queue is created, not changed after")
                updated = replace(
                    record,
                    settings=apply_settings(record.settings, changes),
                    updated_ms=self._clock.wall_ms(),
                )
                if await self._store.put_if_version(key, encode_queue(updated), version):
                    self._order.changed(QUEUE_NEWS, name)
                    self._set_queue(name, updated)
                    break
            else:
                raise Conflict("queue settings changed concurrently; retry")
        await self._announce(QUEUE_NEWS, name)  # outside the lock (see _update_topic)
        return updated

    async def _check_redrive(self, name: str, changes: Mapping[str, Any], fifo: bool) -> None:
        """A redrive policy among ``changes`` must name another queue that exists now
        and is of the same type as the queue (``fifo``), as SQS requires: a FIFO
        queue's dead letters keep their groups, which a standard queue would drop
        (and a standard queue's have none, which a FIFO queue needs)."""
        rp = changes.get("redrive_policy")
        if rp is None:
            return
        if rp.dead_letter_queue == name:
            raise InvalidInput("a queue cannot be its own dead-letter queue")
        try:
            dlq = await self.queue(rp.dead_letter_queue)
        except QueueNotFound:
            raise InvalidInput(
                f"dead-letter queue {rp.dead_letter_queue!r} does not exist"
            ) from None
        if dlq.settings.fifo != fifo:
            kinds = ("a FIFO", "a standard") if fifo else ("a standard", "a FIFO")
            raise InvalidInput(
                f"dead-letter queue {rp.dead_letter_queue!r} is {kinds[1]} queue; "
                f"{kinds[0]} queue's dead-letter queue must be {kinds[0]} queue too"
            )

    async def delete_queue(self, name: str) -> QueueInfo:
        """Replace the queue's record by a tombstone (a conditional write on the version
        read, so a queue re-created meanwhile is never the one deleted), unsubscribe it,
        and hand its number to the purgers (they resume from tombstones after a crash).
        """
        key = keys.queue_config(name)
        async with self._records.serial(key):
            for _ in range(CONFIG_RETRIES):
                record, version = await self._read_live(name)
                tomb = Tombstone(name, record.number, self._clock.wall_ms(), purged=False)
                if await self._store.put_if_version(key, encode_tombstone(tomb), version):
                    break
            else:
                raise Conflict("queue changed concurrently; retry")
        self._order.changed(QUEUE_NEWS, name)
        self._set_queue(name, None)
        self.tombstones[name] = tomb
        for fn in self._delete_listeners:
            fn(tomb)
        await self._announce(QUEUE_NEWS, name)  # then each topic it leaves (unsubscribe)
        if self.read_through:
            # Topics another worker subscribed it to since this one's last sync.
            await self._scan_topics()
        await self._unsubscribe_everywhere(name)
        log.info("queue deleted", extra={"queue": name, "number": record.number})
        return record

    async def mark_purged(self, tomb: Tombstone) -> None:
        """Record that ``tomb``'s messages are gone (if the record is still that tombstone)."""
        key = keys.queue_config(tomb.name)
        item = await self._store.get(key)
        if item is None:
            return
        record = decode_queue_record(tomb.name, item.value, self._defaults)
        if isinstance(record, Tombstone) and record.number == tomb.number and not record.purged:
            await self._unsubscribe_deleted(tomb.name)
            done = Tombstone(tomb.name, tomb.number, record.deleted_ms, purged=True)
            await self._store.put_if_version(key, encode_tombstone(done), item.version)
        self.tombstones.pop(tomb.name, None)
