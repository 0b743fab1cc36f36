"""The catalog: queue and topic configuration, stored in the store and cached.

Config lives under its own key prefix, one versioned record per queue or
topic, so a node reloads everything cheaply every sync interval and
concurrent PATCHes never lose each other (each update is a read, modify and
conditional put, retried on a version conflict). A node applies its own
changes to its cache at once; other nodes see them at their next sync. A cache
miss reads through to the store (with a short negative cache), so a queue made
on another node is usable before the next sync, while unknown names cannot
make a node hammer the store.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import msgpack

from dynaq.clock import Clock
from dynaq.config import QueueDefaults
from dynaq.core import keys
from dynaq.errors import (
    AlreadyExists,
    Conflict,
    InvalidInput,
    InvalidName,
    QueueNotFound,
    TopicNotFound,
)
from dynaq.storage.base import Delete, Put, Store, prefix_end

log = logging.getLogger(__name__)

NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,79}")
"""Queue and topic names: 1-80 of letters, digits, ``_``, ``-`` and ``.``; not starting with ``.``/``-``."""

_RETRIES = 20
_MAX_PARTITIONS = 1024
_MAX_SETTING = 2**53
_MAX_PARTITION_AGE_S = 10 * 365 * 86_400.0
_NEGATIVE_CACHE_S = 1.0


def check_name(kind: str, name: str) -> str:
    """Return ``name`` if it is a valid queue/topic name, else raise :class:`InvalidName`."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InvalidName(
            f"invalid {kind} name {name!r}: use 1-80 letters, digits, '_', '-' or '.', "
            "starting with a letter, digit or '_'"
        )
    return name


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """A queue's tunables (Dynamiq's, with units in the names)."""

    visibility_timeout_s: float
    min_partitions: int
    max_partitions: int
    max_partition_age_s: float
    compressed_messages: bool

    @classmethod
    def defaults(cls, d: QueueDefaults) -> QueueSettings:
        return cls(
            d.visibility_timeout_s,
            d.min_partitions,
            d.max_partitions,
            d.max_partition_age_s,
            d.compressed_messages,
        )


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue: its name, its number in message keys, and its settings."""

    name: str
    number: int
    settings: QueueSettings
    created_ms: int


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic and the queues subscribed to it, in subscription order."""

    name: str
    queues: tuple[str, ...]


# PATCH keys (Dynamiq's wire names) → setting name and accepted JSON type.
_PATCHABLE: dict[str, tuple[str, type | tuple[type, ...]]] = {
    "visibility_timeout": ("visibility_timeout_s", (int, float)),
    "min_partitions": ("min_partitions", int),
    "max_partitions": ("max_partitions", int),
    "max_partition_age": ("max_partition_age_s", (int, float)),
    "compressed_messages": ("compressed_messages", bool),
}


def parse_settings_patch(current: QueueSettings, patch: Any) -> QueueSettings:
    """Apply a PATCH body to ``current``; raise :class:`InvalidInput` on any bad key or value."""
    if not isinstance(patch, Mapping):
        raise InvalidInput("queue settings must be a JSON object")
    changes: dict[str, Any] = {}
    for key, value in patch.items():
        if key not in _PATCHABLE:
            raise InvalidInput(
                f"unknown queue setting {key!r}; allowed: {', '.join(sorted(_PATCHABLE))}"
            )
        field_name, accepted = _PATCHABLE[key]
        if isinstance(value, bool) and accepted is not bool:
            raise InvalidInput(f"{key} must be a number, not a boolean")
        if not isinstance(value, accepted):
            expected = (
                "a boolean" if accepted is bool else "an integer" if accepted is int else "a number"
            )
            raise InvalidInput(f"{key} must be {expected}")
        if isinstance(value, bool):
            changes[field_name] = value
            continue
        if isinstance(value, int | float):
            if not 0 <= value < _MAX_SETTING:  # also refuses NaN and infinities
                raise InvalidInput(f"{key} must be a finite, non-negative number below 2^53")
            changes[field_name] = float(value) if isinstance(accepted, tuple) else value
    updated = replace(current, **changes)
    if updated.min_partitions < 1:
        raise InvalidInput("min_partitions must be at least 1")
    if updated.max_partitions < updated.min_partitions:
        raise InvalidInput("min_partitions must not be greater than max_partitions")
    if updated.visibility_timeout_s > 12 * 3600:
        raise InvalidInput("visibility_timeout must be at most 43200 seconds (12 hours)")
    if updated.max_partitions > _MAX_PARTITIONS:
        raise InvalidInput(f"max_partitions must be at most {_MAX_PARTITIONS} (one per lane)")
    if updated.max_partition_age_s > _MAX_PARTITION_AGE_S:
        raise InvalidInput(f"max_partition_age must be at most {_MAX_PARTITION_AGE_S:g} seconds")
    return updated


def _encode_queue(info: QueueInfo) -> bytes:
    data = {"number": info.number, "created_ms": info.created_ms, **asdict(info.settings)}
    return bytes(msgpack.packb(data))


def _decode_queue(name: str, raw: bytes, defaults: QueueDefaults) -> QueueInfo:
    data = msgpack.unpackb(raw)
    base = asdict(QueueSettings.defaults(defaults))
    settings = QueueSettings(**{k: data.get(k, v) for k, v in base.items()})
    return QueueInfo(name, int(data["number"]), settings, int(data.get("created_ms", 0)))


def _encode_topic(info: TopicInfo) -> bytes:
    return bytes(msgpack.packb({"queues": list(info.queues)}))


def _decode_topic(name: str, raw: bytes) -> TopicInfo:
    return TopicInfo(name, tuple(msgpack.unpackb(raw).get("queues", [])))


class Catalog:
    """Queue and topic config: the store is the truth, this is a synced cache."""

    def __init__(self, store: Store, clock: Clock, defaults: QueueDefaults) -> None:
        self._store = store
        self._clock = clock
        self._defaults = defaults
        self._queues: dict[str, QueueInfo] = {}
        self._topics: dict[str, TopicInfo] = {}
        self._missing: dict[bytes, float] = {}
        self._queue_listeners: list[Callable[[QueueInfo | None, QueueInfo | None], None]] = []

    def on_queue_change(self, fn: Callable[[QueueInfo | None, QueueInfo | None], None]) -> None:
        """Call ``fn(old, new)`` whenever a queue appears, changes or disappears."""
        self._queue_listeners.append(fn)

    def _set_queue(self, name: str, new: QueueInfo | None) -> None:
        old = self._queues.get(name)
        if old == new:
            return
        if new is None:
            self._queues.pop(name, None)
        else:
            self._queues[name] = new
            self._missing.pop(keys.queue_config(name), None)
        for fn in self._queue_listeners:
            fn(old, new)

    # sync --------------------------------------------------------------

    async def reload(self) -> None:
        """Read every queue and topic from the store and apply differences."""
        queues = {
            name: _decode_queue(name, raw, self._defaults)
            for name, raw in await self._scan_prefix(keys.CONFIG_QUEUE)
        }
        for name in list(self._queues):
            if name not in queues:
                self._set_queue(name, None)
        for name, info in queues.items():
            self._set_queue(name, info)
        self._topics = {
            name: _decode_topic(name, raw)
            for name, raw in await self._scan_prefix(keys.CONFIG_TOPIC)
        }

    async def _scan_prefix(self, prefix: bytes) -> list[tuple[str, bytes]]:
        out: list[tuple[str, bytes]] = []
        start, end = prefix, prefix_end(prefix)
        while True:
            rows = await self._store.scan(start, end, 1000)
            out.extend((k[len(prefix) :].decode(), v) for k, v in rows)
            if len(rows) < 1000:
                return out
            start = rows[-1][0] + b"\x00"

    # queues --------------------------------------------------------------

    def queue_names(self) -> list[str]:
        return sorted(self._queues)

    def cached_queue(self, name: str) -> QueueInfo | None:
        return self._queues.get(name)

    async def queue(self, name: str) -> QueueInfo:
        """The queue's config; reads through to the store on a cache miss."""
        info = self._queues.get(name)
        if info is not None:
            return info
        key = keys.queue_config(name)
        now = self._clock.monotonic()
        if self._missing.get(key, -1.0) > now:
            raise QueueNotFound("Queue did not exist.")
        item = await self._store.get(key)
        if item is None:
            self._missing[key] = now + _NEGATIVE_CACHE_S
            if len(self._missing) > 10_000:
                self._missing.clear()
            raise QueueNotFound("Queue did not exist.")
        info = _decode_queue(name, item.value, self._defaults)
        self._set_queue(name, info)
        return info

    async def _next_queue_number(self) -> int:
        for _ in range(_RETRIES):
            item = await self._store.get(keys.QUEUE_NUMBER_SEQ)
            if item is None:
                if await self._store.put_if_absent(keys.QUEUE_NUMBER_SEQ, b"1") is not None:
                    return 1
                continue
            n = int(item.value) + 1
            if await self._store.put_if_version(
                keys.QUEUE_NUMBER_SEQ, str(n).encode(), item.version
            ):
                return n
        raise Conflict("could not allocate a queue number under contention; retry")

    async def create_queue(self, name: str) -> QueueInfo:
        """Create a queue with default settings; :class:`AlreadyExists` if it exists."""
        check_name("queue", name)
        if name in self._queues or await self._store.get(keys.queue_config(name)) is not None:
            raise AlreadyExists("Queue already exists.")
        number = await self._next_queue_number()
        info = QueueInfo(
            name, number, QueueSettings.defaults(self._defaults), self._clock.wall_ms()
        )
        if await self._store.put_if_absent(keys.queue_config(name), _encode_queue(info)) is None:
            raise AlreadyExists("Queue already exists.")
        self._set_queue(name, info)
        log.info("queue created", extra={"queue": name, "number": number})
        return info

    async def update_queue(self, name: str, patch: Any) -> QueueInfo:
        """Apply a settings PATCH with a conditional put, retrying on conflicts."""
        key = keys.queue_config(name)
        for _ in range(_RETRIES):
            item = await self._store.get(key)
            if item is None:
                self._set_queue(name, None)
                raise QueueNotFound("Queue did not exist.")
            current = _decode_queue(name, item.value, self._defaults)
            updated = replace(current, settings=parse_settings_patch(current.settings, patch))
            if await self._store.put_if_version(key, _encode_queue(updated), item.version):
                self._set_queue(name, updated)
                return updated
        raise Conflict("queue settings changed concurrently; retry")

    async def delete_queue(self, name: str) -> QueueInfo:
        """Remove the queue and its subscriptions; mark its messages for purging.

        The config removal and the purge marker are one atomic batch, so a
        crash never leaves messages that nothing will remove.
        """
        key = keys.queue_config(name)
        item = await self._store.get(key)
        if item is None:
            self._set_queue(name, None)
            raise QueueNotFound("Queue did not exist.")
        info = _decode_queue(name, item.value, self._defaults)
        await self._store.write_batch([Delete(key), Put(keys.purge_marker(info.number), b"")])
        self._set_queue(name, None)
        for topic in list(self._topics.values()):
            if name in topic.queues:
                with contextlib.suppress(TopicNotFound):
                    await self.unsubscribe(topic.name, name)
        log.info("queue deleted", extra={"queue": name, "number": info.number})
        return info

    # topics --------------------------------------------------------------

    def topic_names(self) -> list[str]:
        return sorted(self._topics)

    async def topic(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is not None:
            return info
        item = await self._store.get(keys.topic_config(name))
        if item is None:
            raise TopicNotFound("Topic did not exist.")
        info = _decode_topic(name, item.value)
        self._topics[name] = info
        return info

    async def create_topic(self, name: str) -> TopicInfo:
        check_name("topic", name)
        info = TopicInfo(name, ())
        if await self._store.put_if_absent(keys.topic_config(name), _encode_topic(info)) is None:
            raise AlreadyExists("Topic already exists.")
        self._topics[name] = info
        return info

    async def delete_topic(self, name: str) -> None:
        if not await self._store.delete(keys.topic_config(name)):
            self._topics.pop(name, None)
            raise TopicNotFound("Topic did not exist.")
        self._topics.pop(name, None)

    async def _update_topic(
        self, name: str, change: Callable[[TopicInfo], TopicInfo], missing: str
    ) -> TopicInfo:
        key = keys.topic_config(name)
        for _ in range(_RETRIES):
            item = await self._store.get(key)
            if item is None:
                self._topics.pop(name, None)
                raise TopicNotFound(missing)
            updated = change(_decode_topic(name, item.value))
            if await self._store.put_if_version(key, _encode_topic(updated), item.version):
                self._topics[name] = updated
                return updated
        raise Conflict("topic changed concurrently; retry")

    async def subscribe(self, topic: str, queue: str) -> TopicInfo:
        """Subscribe ``queue`` to ``topic`` (idempotent)."""
        if topic not in self._topics and await self._store.get(keys.topic_config(topic)) is None:
            raise TopicNotFound("Topic does not exist. Please create it first.")
        try:
            await self.queue(queue)
        except QueueNotFound:
            raise QueueNotFound("Queue does not exist. Please create it first") from None

        def add(t: TopicInfo) -> TopicInfo:
            return t if queue in t.queues else replace(t, queues=(*t.queues, queue))

        return await self._update_topic(topic, add, "Topic does not exist. Please create it first.")

    async def unsubscribe(self, topic: str, queue: str) -> TopicInfo:
        """Remove ``queue`` from ``topic``'s subscribers (idempotent)."""

        def remove(t: TopicInfo) -> TopicInfo:
            return replace(t, queues=tuple(q for q in t.queues if q != queue))

        return await self._update_topic(topic, remove, "Topic did not exist.")
