"""The typed results of the client's stream calls (:mod:`dynaq.client.ops_streams`),
shared by :class:`~dynaq.client.Client` and :class:`~dynaq.client.AsyncClient`;
the rest are in :mod:`dynaq.client.types`, whose conventions hold here too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StreamInfo:
    """A stream on the node that answered (streams are node-local: see the README).

    ``size`` is the next index (entries are numbered densely from 0);
    ``schema`` is filled by :meth:`~dynaq.client.Client.describe_stream` only
    (a listing does not carry it).
    """

    name: str
    order_key: str | None
    signature: str
    size: int
    segments: int = 0
    fsyncs: int = 0
    schema: Mapping[str, Any] | None = field(default=None, compare=False)
    copies: Mapping[str, int] | None = field(default=None, compare=False)
    """In a ring, in a listing: the size each follower's copy reported (fsync'd) to the
    stream's authority; ``None`` on a node alone."""

    @classmethod
    def from_wire(cls, got: Mapping[str, Any]) -> StreamInfo:
        copies = got.get("copies")
        return cls(
            str(got["name"]),
            got.get("order_key"),
            str(got["signature"]),
            int(got["size"]),
            int(got.get("segments", 0)),
            int(got.get("fsyncs", 0)),
            got.get("schema"),
            None if copies is None else {str(k): int(v) for k, v in copies.items()},
        )


@dataclass(frozen=True)
class StreamDeclared:
    """What a declaration did: ``created`` a stream, ``extended`` its schema, or
    neither (the same schema again: declaring is idempotent)."""

    name: str
    signature: str
    order_key: str | None
    created: bool
    extended: bool
    retention: dict[str, float] = field(default_factory=dict)
    """The stream's own retention limits (``max_bytes``, ``max_age_s``; empty: the node's)."""


@dataclass(frozen=True)
class StreamEntry:
    """One durable entry: its dense ``index``, its ``order`` key value, the entry itself."""

    index: int
    order: int
    entry: Any

    @classmethod
    def from_wire(cls, got: Mapping[str, Any]) -> StreamEntry:
        return cls(int(got["index"]), int(got["order"]), got["entry"])


@dataclass(frozen=True)
class Appended:
    """An append's entries, durable: indexes ``first_index .. first_index + count - 1``."""

    first_index: int
    count: int


@dataclass(frozen=True)
class PublisherLease:
    """A stream's exclusive publisher lease: append with ``token`` (the fencing token,
    larger than any issued before for the stream) and renew within ``ttl_s``."""

    stream: str
    token: int
    ttl_s: float
