"""Stream operations as data: the catalog, appends under a publisher lease, reads,
and what a live follow sends and how its answer is decoded (no I/O here).

Streams are node-local (each node keeps its own under its data directory),
so a stream call is meaningful only against the node that holds the stream:
give the client that node's endpoint. Failover would reach another node's
stream of the same name, or none; a fenced append (with a token) is refused
there, because that node's lease is not held.

Retry rules (see :mod:`dynaq.client.ops`): an append or a first acquire is
sent again only if it never left (a second copy would append twice, or take
a second token); declaring (idempotent for the same schema), renewing with
the holder's token, releasing, listing and reading are always safe.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from dynaq.client.ops import JSON, Call, Op, Retry, json_bytes, nothing, quoted, single
from dynaq.client.stream_types import (
    Appended,
    PublisherLease,
    StreamDeclared,
    StreamEntry,
    StreamInfo,
)

TOKEN_HEADER = "X-Publisher-Token"
FOLLOW_FORMAT = "msgpack"
"""A follow reads msgpack objects back to back (``application/x-msgpack-seq``):
no line framing to get wrong when an entry holds a newline or a tab."""


def _path(stream: str, tail: str = "") -> str:
    return f"/v2/streams/{quoted(stream)}{tail}"


def _token(token: int | None) -> dict[str, str] | None:
    return None if token is None else {TOKEN_HEADER: str(token)}


def list_streams(hidden: bool = False) -> Op[list[StreamInfo]]:
    """The catalog; processors' backing streams (``_cues.*``) only when ``hidden``."""

    def read(got: Any) -> list[StreamInfo]:
        return [StreamInfo.from_wire(s) for s in got["streams"]]

    return single(Call("GET", "/v2/streams" + ("?hidden=true" if hidden else ""), read))


def declare_stream(
    stream: str,
    schema: Mapping[str, Any],
    order_key: str | None,
    retention: Mapping[str, float] | None = None,
) -> Op[StreamDeclared]:
    body: dict[str, Any] = {"schema": dict(schema)}
    if order_key is not None:
        body["order_key"] = order_key
    if retention is not None:
        body["retention"] = dict(retention)

    def read(got: Any) -> StreamDeclared:
        return StreamDeclared(
            str(got["name"]),
            str(got["signature"]),
            got.get("order_key"),
            bool(got["created"]),
            bool(got["extended"]),
            dict(got.get("retention") or {}),
        )

    return single(Call("PUT", _path(stream), read, json_bytes(body), JSON))


def describe_stream(stream: str) -> Op[StreamInfo]:
    """The schema (404 if there is no such stream), then the figures from the listing."""

    def combine(results: list[Any]) -> StreamInfo:
        described, listed = results
        for info in listed:
            if info.name == stream:
                return StreamInfo(
                    info.name,
                    info.order_key,
                    info.signature,
                    info.size,
                    info.segments,
                    info.fsyncs,
                    described["schema"],
                )
        # Deleted between the two requests: what the first one said, with no figures.
        return StreamInfo.from_wire({**described, "size": 0})

    schema: Call[dict[str, Any]] = Call("GET", _path(stream, "/schema"), dict)
    return Op([schema, *list_streams(hidden=True).calls], combine)


def delete_stream(stream: str) -> Op[None]:
    return single(Call("DELETE", _path(stream), nothing))


def stream_size(stream: str) -> Op[int]:
    """How many entries the stream holds (its next index)."""
    return single(Call("GET", _path(stream, "?sizeonly=true"), lambda got: int(got["size"])))


def read_stream(stream: str, start: int, count: int) -> Op[list[dict[str, Any]]]:
    """Up to ``count`` entries from index ``start`` as ``{"index", "order", "entry"}``,
    answered at once with what is there (``nowait``: 204 when nothing is)."""
    query = urllib.parse.urlencode({"i": start, "n": count, "nowait": "true", "format": "array"})
    return single(Call("GET", _path(stream, f"?{query}"), lambda got: list(got or [])))


def append(
    stream: str, entries: Sequence[Any], token: int | None, expect_index: int | None = None
) -> Op[Appended]:
    """One request: the node writes all of ``entries`` or none (schema, order keys, lease;
    with ``expect_index``, only if the first entry gets that index, else
    :class:`~dynaq.errors.IndexTaken`)."""

    def read(got: Any) -> Appended:
        return Appended(int(got["first_index"]), int(got["count"]))

    body = json_bytes({"entries": list(entries)})
    if expect_index is not None and expect_index < 0:
        raise ValueError(f"expect_index must be ≥ 0, got {expect_index}")
    tail = "/entries" if expect_index is None else f"/entries?expect_index={expect_index}"
    call = Call("POST", _path(stream, tail), read, body, JSON, Retry.UNSENT, headers=_token(token))
    return single(call)


def acquire_publisher(stream: str, token: int | None, ttl_s: float | None) -> Op[PublisherLease]:
    """Take the lease (``token`` None) or renew it (the holder's ``token``)."""

    def read(got: Any) -> PublisherLease:
        return PublisherLease(stream, int(got["token"]), float(got["ttl_s"]))

    body = b"" if ttl_s is None else json_bytes({"ttl_s": ttl_s})
    # A renewal sent twice renews twice; a first acquire sent twice takes a token
    # nobody would know, and fences the caller out until it expires.
    retry = Retry.UNSENT if token is None else Retry.ALWAYS
    path = _path(stream, "/publisher")
    return single(Call("POST", path, read, body, JSON, retry, headers=_token(token)))


def release_publisher(stream: str, token: int) -> Op[None]:
    return single(Call("DELETE", _path(stream, "/publisher"), nothing, headers=_token(token)))


def start_query(start: int | None, tail: int | None, since: int | None) -> dict[str, int]:
    """The listen parameters for where to begin: at most one of index ``start``,
    the last ``tail`` entries, or order key ``since`` (none: the beginning)."""
    named = [("start", "i", start), ("tail", "tail", tail), ("since", "since", since)]
    given = [(name, key, v) for name, key, v in named if v is not None]
    if len(given) > 1:
        raise ValueError("give at most one of start, tail, since")
    for name, _, v in given:
        if v < 0:
            raise ValueError(f"{name} must be ≥ 0, got {v}")
    return {key: v for _, key, v in given}


def read_range(
    stream: str,
    start: int | None,
    count: int,
    tail: int | None,
    since: int | None,
    until: int | None,
) -> Op[list[StreamEntry]]:
    """Up to ``count`` durable entries, answered at once (never waits for more)."""
    if count < 1:
        raise ValueError(f"count must be ≥ 1, got {count}")
    query: dict[str, Any] = {**start_query(start, tail, since), "n": count}
    if until is not None:
        query["until"] = until
    query.update(nowait="true", format="array")

    def read(got: Any) -> list[StreamEntry]:
        return [StreamEntry.from_wire(e) for e in got or []]

    return single(Call("GET", _path(stream, "?" + urllib.parse.urlencode(query)), read))


def follow_path(
    stream: str,
    start: int | None,
    tail: int | None,
    since: int | None,
    count: int | None,
    until: int | None,
) -> str:
    """The listen request a follow sends: replay from the start, then stay open."""
    query: dict[str, Any] = start_query(start, tail, since)
    if count is not None:
        if count < 1:
            raise ValueError(f"count must be ≥ 1, got {count}")
        query["n"] = count
    if until is not None:
        query["until"] = until
    query["format"] = FOLLOW_FORMAT
    return _path(stream, "?" + urllib.parse.urlencode(query))


@dataclass
class FollowPlan:
    """Where a follow is, so that it can start again after a dropped connection
    from the entry after the last one it yielded: none lost, none repeated."""

    stream: str
    start: int | None
    tail: int | None
    since: int | None
    count: int | None
    until: int | None
    next_index: int | None = None
    seen: int = 0
    opened: bool = False
    """Set when an attempt got its answer: a later drop starts a new retry window."""
    ever_opened: bool = False
    """Until then, a follow gives up after the retry policy's ``attempts`` (a wrong
    endpoint fails fast); after, it waits out a restart up to ``deadline_s``."""

    def gives_up(self, retries: int, attempts: int, waited_s: float, deadline_s: float) -> bool:
        return waited_s > deadline_s or (not self.ever_opened and retries + 1 >= attempts)

    @property
    def complete(self) -> bool:
        return self.count is not None and self.seen >= self.count

    def path(self) -> str:
        """The listen request for the next attempt (validates the first one)."""
        if self.next_index is None:
            return follow_path(
                self.stream, self.start, self.tail, self.since, self.count, self.until
            )
        left = None if self.count is None else self.count - self.seen
        return follow_path(self.stream, self.next_index, None, None, left, self.until)

    def saw(self, entry: StreamEntry) -> None:
        self.next_index = entry.index + 1
        self.seen += 1


class EntryDecoder:
    """Turns a follow's body, in whatever pieces the network delivers, into entries."""

    def __init__(self) -> None:
        self._unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)

    def feed(self, data: bytes) -> Iterator[StreamEntry]:
        self._unpacker.feed(data)
        for obj in self._unpacker:
            yield StreamEntry.from_wire(obj)
