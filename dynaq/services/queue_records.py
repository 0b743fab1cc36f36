"""Queue and topic records: names, settings and their rules, and the stored encoding.

A queue's config record is a msgpack map; a deleted queue keeps a
*tombstone* record (``deleted_ms`` set, ``purged`` once its messages are
gone) under the same key, so deletion is a conditional write like every other
change to the key, purges resume from tombstones after a crash, and a name
cannot be re-created while nodes may still hold the old queue in their cache.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import msgpack

from dynaq.config import QueueDefaults
from dynaq.errors import InvalidInput, InvalidName

NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,79}")
"""Queue and topic names: 1-80 of letters, digits, ``_``, ``-`` and ``.``; not starting with ``.``/``-``."""

_MAX_PARTITIONS = 1024
_MAX_PARTITION_AGE_S = 10 * 365 * 86_400.0


def check_name(kind: str, name: str) -> str:
    """Return ``name`` if it is a valid queue/topic name, else raise :class:`InvalidName`."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InvalidName(
            f"invalid {kind} name {name!r}: use 1-80 letters, digits, '_', '-' or '.', "
            "starting with a letter, digit or '_'"
        )
    return name


DEFAULT_RETENTION_S = 4 * 86_400.0
MAX_WAIT_S = 20.0
"""Longest long poll (SQS's limit)."""
MAX_VISIBILITY_S = 43_200
"""Longest visibility timeout (SQS's limit, 12 h)."""
MIN_MESSAGE_BYTES = 1024
MAX_MESSAGE_BYTES = 1 << 20
MAX_TAGS = 50


@dataclass(frozen=True, slots=True)
class RedrivePolicy:
    """Dead-lettering: a message received ``max_receive_count`` times is moved to
    ``dead_letter_queue`` (by name) instead of being served again."""

    dead_letter_queue: str
    max_receive_count: int


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """A queue's tunables (Dynamiq's, with units in the names)."""

    visibility_timeout_s: float
    min_partitions: int
    max_partitions: int
    max_partition_age_s: float
    compressed_messages: bool
    redrive_policy: RedrivePolicy | None = None
    """Where messages go once received ``max_receive_count`` times (None: redelivered forever)."""
    delay_s: float = 0.0
    """How long a new message stays invisible unless it says otherwise (0..900 s)."""
    retention_s: float = DEFAULT_RETENTION_S
    """How long a message is kept after its enqueue (60 s..14 days; SQS's default 4 days)."""
    receive_wait_s: float = 0.0
    """How long a receive that names no wait long-polls (0..20 s; SQS's
    ReceiveMessageWaitTimeSeconds)."""
    max_message_bytes: int = MAX_MESSAGE_BYTES
    """Largest message body this queue takes (1 KiB..1 MiB; SQS's MaximumMessageSize)."""
    fifo: bool = False
    """Set at creation only: a ``.fifo`` queue (SQS FIFO: every message has a group)."""
    content_based_dedup: bool = False
    """FIFO only: a message without a dedup id is deduplicated by its body's SHA-256."""
    tags: tuple[tuple[str, str], ...] = ()
    """Cost-allocation tags (SQS's TagQueue), sorted by key."""

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
    updated_ms: int = 0
    """When its settings last changed (0: never since it was created)."""

    @property
    def modified_ms(self) -> int:
        """When the queue was created or its settings last changed."""
        return self.updated_ms or self.created_ms


@dataclass(frozen=True, slots=True)
class Subscription:
    """How a queue takes a topic's messages: only those its ``filter_policy`` matches
    (SNS's grammar, :mod:`dynaq.core.filters`; None: all) on their attributes or, with
    ``filter_scope`` ``"body"``, on their JSON bodies, as published (``raw``) or
    wrapped in a JSON envelope."""

    filter_policy: dict[str, Any] | None = None
    raw: bool = True
    filter_scope: str = "attributes"


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic and the queues subscribed to it, in subscription order."""

    name: str
    queues: tuple[str, ...]
    subscriptions: Mapping[str, Subscription] = field(default_factory=dict)
    """Options of the subscriptions that have any (the others take everything, raw)."""
    history: bool = False
    """What is published is also kept in the stream :func:`history_stream` names."""

    def subscription(self, queue: str) -> Subscription:
        return self.subscriptions.get(queue, _PLAIN)


MAX_DELAY_S = 900
"""Longest delay, queue default or per message (SQS's limit, 15 minutes)."""
MIN_RETENTION_S = 60
MAX_RETENTION_S = 14 * 86_400
MAX_RECEIVE_COUNT = 1000
"""Largest ``max_receive_count`` of a redrive policy (SQS's limit)."""


def check_settings(s: QueueSettings) -> QueueSettings:
    """Return ``s`` if its values fit together and within range, else raise :class:`InvalidInput`.

    The wire grammar (types, names) is parsed at the edge (``dynaq.api.params``);
    these are the domain's rules, whatever the caller.
    """
    if s.min_partitions < 1:
        raise InvalidInput("min_partitions must be at least 1")
    if s.max_partitions < 1:
        raise InvalidInput(f"max_partitions must be at least 1, got {s.max_partitions}")
    if s.max_partitions < s.min_partitions:
        raise InvalidInput(
            f"min_partitions ({s.min_partitions}) must not be greater than "
            f"max_partitions ({s.max_partitions})"
        )
    if s.visibility_timeout_s > MAX_VISIBILITY_S:
        raise InvalidInput(
            f"visibility_timeout must be at most {MAX_VISIBILITY_S} seconds (12 hours)"
        )
    if s.max_partitions > _MAX_PARTITIONS:
        raise InvalidInput(f"max_partitions must be at most {_MAX_PARTITIONS} (one per lane)")
    if s.max_partition_age_s > _MAX_PARTITION_AGE_S:
        raise InvalidInput(f"max_partition_age must be at most {_MAX_PARTITION_AGE_S:g} seconds")
    if s.delay_s > MAX_DELAY_S:
        raise InvalidInput(f"delay_s must be in 0..{MAX_DELAY_S} seconds")
    if not MIN_RETENTION_S <= s.retention_s <= MAX_RETENTION_S:
        raise InvalidInput(
            f"retention_s must be in {MIN_RETENTION_S}..{MAX_RETENTION_S} seconds (14 days)"
        )
    if not 0 <= s.receive_wait_s <= MAX_WAIT_S:
        raise InvalidInput(f"receive_wait_s must be in 0..{MAX_WAIT_S:g} seconds")
    if not MIN_MESSAGE_BYTES <= s.max_message_bytes <= MAX_MESSAGE_BYTES:
        raise InvalidInput(f"max_message_bytes must be in {MIN_MESSAGE_BYTES}..{MAX_MESSAGE_BYTES}")
    if s.content_based_dedup and not s.fifo:
        raise InvalidInput("content_based_dedup needs a FIFO queue")
    if len(s.tags) > MAX_TAGS:
        raise InvalidInput(f"at most {MAX_TAGS} tags per queue")
    for k, v in s.tags:  # SQS's bounds, whichever API sets them
        if not 1 <= len(k) <= 128 or len(v) > 256:
            raise InvalidInput(
                f"tag {k[:128]!r}: a key of 1..128 characters, a value of 256 at most"
            )
    rp = s.redrive_policy
    if rp is not None:
        check_name("queue", rp.dead_letter_queue)
        if not 1 <= rp.max_receive_count <= MAX_RECEIVE_COUNT:
            raise InvalidInput(
                f"redrive_policy.max_receive_count must be in 1..{MAX_RECEIVE_COUNT}"
            )
    return s


def apply_settings(current: QueueSettings, changes: Mapping[str, Any]) -> QueueSettings:
    """``current`` with ``changes`` (setting name → typed value) applied and checked."""
    unknown = set(changes) - set(QueueSettings.__dataclass_fields__)
    if unknown:
        raise InvalidInput(f"unknown queue settings: {', '.join(sorted(unknown))}")
    return check_settings(replace(current, **changes))


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What is left of a deleted queue: its number (whose messages are purged) and when."""

    name: str
    number: int
    deleted_ms: int
    purged: bool


def encode_queue(info: QueueInfo) -> bytes:
    data = {
        "number": info.number,
        "created_ms": info.created_ms,
        "updated_ms": info.updated_ms,
        **asdict(info.settings),
    }
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
    values = {k: data.get(k, v) for k, v in base.items()}
    rp = values.get("redrive_policy")
    values["redrive_policy"] = None if rp is None else RedrivePolicy(**rp)
    values["tags"] = tuple((str(k), str(v)) for k, v in values["tags"])
    settings = QueueSettings(**values)
    return QueueInfo(
        name,
        int(data["number"]),
        settings,
        int(data.get("created_ms", 0)),
        int(data.get("updated_ms", 0)),
    )


_PLAIN = Subscription()


def encode_topic(info: TopicInfo) -> bytes:
    data: dict[str, Any] = {"queues": list(info.queues)}
    subs = {
        q: {"filter": s.filter_policy, "raw": s.raw}
        | ({"scope": s.filter_scope} if s.filter_scope != "attributes" else {})
        for q, s in info.subscriptions.items()
        if q in info.queues and s != _PLAIN
    }
    if subs:
        data["subs"] = subs
    if info.history:
        data["history"] = True
    return bytes(msgpack.packb(data))


def decode_topic(name: str, raw: bytes) -> TopicInfo:
    data = msgpack.unpackb(raw)
    subs = {
        q: Subscription(
            s.get("filter"), bool(s.get("raw", True)), str(s.get("scope", "attributes"))
        )
        for q, s in data.get("subs", {}).items()
    }
    return TopicInfo(name, tuple(data.get("queues", [])), subs, bool(data.get("history", False)))


def history_stream(topic: str) -> str:
    """The stream that keeps a topic's history (stream names allow the dot)."""
    return f"topic.{topic}"


def check_visibility(visibility_timeout_s: float) -> None:
    """A visibility timeout a receive or a change may ask for: 0..12 h."""
    if not 0 <= visibility_timeout_s <= MAX_VISIBILITY_S:
        raise InvalidInput(f"visibility timeout must be in 0..{MAX_VISIBILITY_S} seconds")
