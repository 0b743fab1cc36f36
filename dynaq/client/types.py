"""The typed results the client returns, shared by :class:`~dynaq.client.Client` and
:class:`~dynaq.client.AsyncClient`.

Ids are Python ints (the wire carries them as msgpack integers or JSON decimal
strings). Each ``from_wire`` takes the decoded response member and keeps what
it does not know in ``raw``, so a node newer than the client loses nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dynaq.client.queue_settings import QueueSettings as QueueSettings


@dataclass(frozen=True)
class RingMember:
    """A live node and its slice of the id space (inclusive)."""

    name: str
    http: str
    from_id: int
    to_id: int


@dataclass(frozen=True)
class PartitionRange:
    """One partition a node serves a queue from (ids inclusive)."""

    node: str
    http: str
    index: int
    from_id: int
    to_id: int


@dataclass(frozen=True)
class Health:
    """``GET /health``: ``status`` is ``serving``, ``starting`` or ``draining``. On a
    node of several workers, ``worker`` names the one that answered, ``workers``
    says how many the node runs and ``workers_live`` how many of them are in its
    ring of workers now (``None``, 1 and 1 on a node of one process)."""

    status: str
    node: str
    members: int
    worker: str | None = None
    workers: int = 1
    workers_live: int = 1


@dataclass(frozen=True)
class ReceivedMessage:
    """A message received under a visibility timeout.

    ``addr`` is the address of the node that served it: that node holds its
    in-flight state, so visibility changes must go there.
    """

    id: int
    body: bytes
    enqueued_at_ms: int
    receive_count: int
    attributes: dict[str, str] | None
    group: str | None = None
    addr: str = ""
    receipt: str | None = None
    """Names this delivery: :meth:`~dynaq.client.Client.transact` deletes by it (and
    refuses it once the message was served again)."""

    @classmethod
    def from_wire(cls, m: Mapping[str, Any], addr: str) -> ReceivedMessage:
        """From one message of a receive answer, served by node ``addr``.

        A receive of 100 builds 100 of these: filling ``__dict__`` at once skips
        the frozen dataclass's ``object.__setattr__`` per field (measured: 0.5 µs
        a message instead of 1.0). The result is the same frozen, equal object
        (a unit test holds the fields in step).
        """
        msg = object.__new__(cls)
        msg.__dict__.update(
            id=int(m["id"]),
            body=m["body"],
            enqueued_at_ms=m["enqueued_at_ms"],
            receive_count=m["receive_count"],
            attributes=m.get("attributes"),
            group=m.get("group"),
            addr=addr,
            receipt=m.get("receipt"),
        )
        return msg


@dataclass(frozen=True)
class PeekedMessage:
    """A stored message read without taking it (no lock, no receive count)."""

    id: int
    body: bytes
    enqueued_at_ms: int | None = None
    attributes: dict[str, str] | None = None


@dataclass(frozen=True)
class BrowsePage:
    """Stored messages in id order; ``next_from_id`` continues (``None``: the end)."""

    messages: list[PeekedMessage]
    next_from_id: int | None


@dataclass(frozen=True)
class NewMessage:
    """A message to send. ``dedup_id`` makes a resend safe (stored once per window)."""

    body: bytes | str
    attributes: Mapping[str, str] | None = None
    group: str | None = None
    dedup_id: str | None = None

    def wire(self) -> dict[str, Any]:
        body = self.body.encode() if isinstance(self.body, str) else self.body
        out: dict[str, Any] = {"body": body}
        if self.attributes:
            out["attributes"] = dict(self.attributes)
        if self.group is not None:
            out["group"] = self.group
        if self.dedup_id is not None:
            out["dedup_id"] = self.dedup_id
        return out


@dataclass(frozen=True)
class TxnDelete:
    """A transaction's input: a received message, by its queue and receipt."""

    queue: str
    receipt: str

    @classmethod
    def of(cls, queue: str, message: ReceivedMessage) -> TxnDelete:
        """The input for ``message`` received from ``queue``."""
        if message.receipt is None:
            raise ValueError(f"message {message.id} carries no receipt (an old node served it)")
        return cls(queue, message.receipt)

    def wire(self) -> dict[str, Any]:
        return {"queue": self.queue, "receipt": self.receipt}


@dataclass(frozen=True)
class TxnEnqueue:
    """A transaction's output: a new message for ``queue``. A ``dedup_id`` (a
    processor's delivery hash) makes a retried transaction store it once."""

    queue: str
    body: bytes | str
    attributes: Mapping[str, str] | None = None
    group: str | None = None
    dedup_id: str | None = None
    delay_s: float | None = None

    def wire(self) -> dict[str, Any]:
        out = NewMessage(self.body, self.attributes, self.group, self.dedup_id).wire()
        out["queue"] = self.queue
        if self.delay_s is not None:
            if isinstance(self.delay_s, float) and not math.isfinite(self.delay_s):
                raise ValueError(f"delay_s must be a finite number, got {self.delay_s!r}")
            out["delay_s"] = self.delay_s
        return out


@dataclass(frozen=True)
class TxnOutput:
    """Where an output went; ``duplicate``: its dedup id was stored already (this is
    the first message's id)."""

    queue: str
    id: int
    duplicate: bool = False


@dataclass(frozen=True)
class TxnResult:
    """A committed transaction: its outputs in order, and how many inputs it deleted.
    ``replayed``: it had committed before (a retry); nothing new was written."""

    enqueued: list[TxnOutput]
    deleted: int
    replayed: bool = False

    @classmethod
    def from_wire(cls, got: Mapping[str, Any]) -> TxnResult:
        outs = [
            TxnOutput(str(e["queue"]), int(e["id"]), bool(e.get("duplicate", False)))
            for e in got["enqueued"]
        ]
        return cls(outs, int(got["deleted"]), bool(got.get("replayed", False)))


@dataclass(frozen=True)
class QueueInfo:
    """``GET /v2/queues/:queue``: settings and this node's figures.

    ``depth`` is exact on a single node; in a cluster each node counts what
    passed through it (see the README).
    """

    name: str
    settings: QueueSettings
    partitions: int
    depth: int
    in_flight: int
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    visible: int = 0
    """Ring-wide figures (each node's at most a few seconds old): stored and not in flight,"""
    delayed: int = 0
    """waiting for their delay,"""
    dead_lettered: int = 0
    """moved to the dead-letter queue since the nodes started,"""
    oldest_age_s: float = 0.0
    """and the age of the oldest stored message."""

    @classmethod
    def from_wire(cls, got: Mapping[str, Any]) -> QueueInfo:
        settings = QueueSettings.from_wire(got)
        return cls(
            str(got["name"]),
            settings,
            int(got.get("partitions", 0)),
            int(got.get("depth", 0)),
            int(got.get("in_flight", 0)),
            dict(got),
            int(got.get("visible", 0)),
            int(got.get("delayed", 0)),
            int(got.get("dead_lettered", 0)),
            float(got.get("oldest_age_s", 0.0)),
        )


@dataclass(frozen=True)
class TaskInfo:
    """A background queue task (purge, redrive) and its progress."""

    id: str
    kind: str
    queue: str
    state: str
    """``running``, ``cancelling``, ``cancelled``, ``done``, ``failed`` or ``interrupted``
    (its node stopped answering)."""
    moved: int
    skipped: int
    to_queue: str | None = None
    error: str | None = None

    @property
    def finished(self) -> bool:
        return self.state not in ("running", "cancelling")

    @classmethod
    def from_wire(cls, got: Mapping[str, Any]) -> TaskInfo:
        return cls(
            str(got["id"]),
            str(got["kind"]),
            str(got["queue"]),
            str(got["state"]),
            int(got.get("moved", 0)),
            int(got.get("skipped", 0)),
            got.get("to_queue"),
            got.get("error"),
        )


@dataclass(frozen=True)
class ItemBlock:
    """A block of exact-batch items: item ids ``<batch>:<id>:0 … upto-1``."""

    batch_id: int
    id: str
    upto: int

    def item_ids(self) -> list[str]:
        """Every item id of the block, to tag messages with (``dynaq.batch_item``)."""
        return [f"{self.batch_id}:{self.id}:{i}" for i in range(self.upto)]


@dataclass(frozen=True)
class BatchCompletion:
    """A batch that an ack (or a close) completed."""

    batch_id: int
    user_key: str | None
    completed_at_ms: int

    @classmethod
    def from_wire(cls, c: Mapping[str, Any]) -> BatchCompletion:
        return cls(int(c["batchId"]), c.get("userKey"), int(c["completedAt"]))


@dataclass(frozen=True)
class BatchInfo:
    """A batch's header (``GET /api/v1/batch/<mode>/:id``)."""

    batch_id: int
    user_key: str | None
    mode: str
    closed: bool
    complete: bool
    items: int
    pending: int
    created_at_ms: int
    updated_at_ms: int
    completed_at_ms: int | None

    @classmethod
    def from_wire(cls, b: Mapping[str, Any]) -> BatchInfo:
        return cls(
            int(b["batchId"]),
            b.get("userKey"),
            str(b["mode"]),
            bool(b["isClosed"]),
            bool(b["isComplete"]),
            int(b["items"]),
            int(b["pending"]),
            int(b["createdAt"]),
            int(b["updatedAt"]),
            None if b.get("completedAt") is None else int(b["completedAt"]),
        )


MessageLike = NewMessage | bytes | str | Mapping[str, Any]
"""What send and publish calls accept as a message: a :class:`NewMessage`, a bare body,
or a mapping with its fields."""
