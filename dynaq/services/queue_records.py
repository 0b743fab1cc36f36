"""Queue and topic records: names, settings, the PATCH grammar and the stored encoding.

A queue's config record is a msgpack map; a deleted queue keeps a
*tombstone* record (``deleted_ms`` set, ``purged`` once its messages are
gone) under the same key, so deletion is a conditional write like every other
change to the key, purges resume from tombstones after a crash, and a name
cannot be re-created while nodes may still hold the old queue in their cache.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import msgpack

from dynaq.config import QueueDefaults
from dynaq.errors import InvalidInput, InvalidName

NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,79}")
"""Queue and topic names: 1-80 of letters, digits, ``_``, ``-`` and ``.``; not starting with ``.``/``-``."""

_MAX_PARTITIONS = 1024
_MAX_SETTING = 2**53
_MAX_PARTITION_AGE_S = 10 * 365 * 86_400.0


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


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What is left of a deleted queue: its number (whose messages are purged) and when."""

    name: str
    number: int
    deleted_ms: int
    purged: bool


def encode_queue(info: QueueInfo) -> bytes:
    data = {"number": info.number, "created_ms": info.created_ms, **asdict(info.settings)}
    return bytes(msgpack.packb(data))


def encode_tombstone(t: Tombstone) -> bytes:
    data = {"number": t.number, "deleted_ms": t.deleted_ms, "purged": t.purged}
    return bytes(msgpack.packb(data))


def decode_queue_record(name: str, raw: bytes, defaults: QueueDefaults) -> QueueInfo | Tombstone:
    """A stored queue record: the live queue, or its tombstone."""
    data = msgpack.unpackb(raw)
    if "deleted_ms" in data:
        return Tombstone(
            name, int(data["number"]), int(data["deleted_ms"]), bool(data.get("purged"))
        )
    base = asdict(QueueSettings.defaults(defaults))
    settings = QueueSettings(**{k: data.get(k, v) for k, v in base.items()})
    return QueueInfo(name, int(data["number"]), settings, int(data.get("created_ms", 0)))


def encode_topic(info: TopicInfo) -> bytes:
    return bytes(msgpack.packb({"queues": list(info.queues)}))


def decode_topic(name: str, raw: bytes) -> TopicInfo:
    return TopicInfo(name, tuple(msgpack.unpackb(raw).get("queues", [])))
