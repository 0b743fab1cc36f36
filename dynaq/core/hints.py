"""Node-to-node hint messages and their wire codec (pure: bytes in, typed values out).

A node tells the owner of a slice about writes made elsewhere (messages
deleted, lanes written) and, when it leaves gracefully, hands over the
in-flight messages the owner must keep invisible. On the wire one message is
a msgpack map::

    {"queues":   {queue: {"deleted": [id, ...], "lanes": [lane, ...], "rewind": [id, ...]}},
     "handover": {queue: [[id, seconds_left, receive_count, group, attributes], ...]}}

(``attributes`` was added later: an entry of four elements has none. ``rewind``
was added later too, and may be absent: ids of group messages just written, so
the owner's next scan starts no later than each, see :class:`QueueHints`.)

:func:`decode_hints` checks every field's type and range and raises
:class:`~dynaq.errors.InvalidInput` for anything else, so a receiver never
acts on a half-parsed message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import msgpack

from dynaq.core.ids import LANES, MAX_ID
from dynaq.core.inflight import InFlight
from dynaq.errors import InvalidInput

HINTS_PATH = "/internal/v1/hints"
"""The node-to-node route hints are POSTed to."""
STATS_PATH = "/internal/v1/stats"
"""A node's figures for its slice of one queue: msgpack ``{"queue": name}`` → the figures."""
VISIBILITY_PATH = "/internal/v1/visibility"
"""A visibility change forwarded to the owner of the messages' slice: msgpack
``{"queue": name, "ids": [int], "visibility_timeout_s": s}`` → ``{"changed": [int]}``;
with ``"deliveries": [int]`` (one per id: receipts) also ``"stale": [int]``."""
RECEIPT_DELETE_PATH = "/internal/v1/receipts/delete"
"""A receipt-checked delete forwarded to the node that served the messages: msgpack
``{"queue": name, "ids": [int], "deliveries": [int]}`` → ``{"deleted": [int], "stale": [int]}``."""
CATALOG_NEWS_PATH = "/internal/v1/catalog/news"
"""A peer changed one config record: msgpack ``{"kind": "queue" | "topic", "name": name}``
→ 200 once this node has re-read that record from the store (a node of an earlier
version answers 404; it sees the change at its next config sync)."""
RECEIPT_HOLD_PATH = "/internal/v1/receipts/hold"
"""A transaction's receipts, checked and held by the node that served the messages:
msgpack ``{"queue": name, "ids": [int], "deliveries": [int]}`` →
``{"stale": [int], "busy": [int]}`` (all claimed and held when both are empty, none
otherwise; ``busy``: claimed by another transaction); with ``"release": true`` the
claims of a transaction that did not commit are released."""


@dataclass(frozen=True, slots=True)
class QueueHints:
    """Writes one queue saw on the sending node."""

    deleted: tuple[int, ...] = ()
    lanes: tuple[int, ...] = ()
    rewind: tuple[int, ...] = ()
    """Group messages written there, lowest id per lane: one may have landed behind
    the owner's scan cursor (its id was drawn before, and committed after, a
    larger one in its lane), and its group's later messages must not be served
    before it."""


@dataclass(frozen=True, slots=True)
class HandoverEntry:
    """One in-flight message handed to its next owner by a leaving node."""

    message_id: int
    seconds_left: float
    receive_count: int
    group: str | None = None
    attributes: dict[str, str] | None = None
    """Kept so a delete on the new owner acks the message's batch item without a read."""
    delivery: int = 0
    """The latest delivery's number, so the new owner refuses receipts of earlier
    deliveries as the old one did (0: unknown, from a peer of an earlier version)."""

    @classmethod
    def of(cls, message_id: int, f: InFlight, now: float) -> HandoverEntry:
        """The entry for ``message_id``, in flight here as ``f`` (an expired one too:
        visible at once at its next owner, it carries the receive count there)."""
        left = max(0.0, f.deadline - now)
        return cls(message_id, left, f.receive_count, f.group, f.attributes, f.delivery)


@dataclass(frozen=True, slots=True)
class HintsMessage:
    """One POST from a peer: hints per queue, and (on a graceful leave) a handover."""

    queues: dict[str, QueueHints] = field(default_factory=dict)
    handover: dict[str, tuple[HandoverEntry, ...]] = field(default_factory=dict)
    released_by: str | None = None
    """Set on the last message of a lane handoff: the sender has sent everything it
    had in flight in the lanes it gave the receiver (:mod:`dynaq.services.queues.slice_handoff`)."""
    recheck: tuple[str, ...] = ()
    """Queues whose messages the sender removed without knowing their ids (a purge):
    the receiver checks its in-flight entries of them against the store."""
    handoff_from: str | None = None
    """Set on every message of a lane handoff (not of a leave's handover): the
    sender's name, so the receiver can tell the lanes it was given from lanes it
    has given away since (it passes the entries of those on to their owner)."""


def encode_hints(message: HintsMessage) -> bytes:
    """The wire form of ``message``."""
    released: dict[str, object] = {}
    if message.released_by is not None:
        released["released_by"] = message.released_by
    if message.recheck:
        released["recheck"] = list(message.recheck)
    if message.handoff_from is not None:
        released["handoff_from"] = message.handoff_from
    return bytes(
        msgpack.packb(
            {
                **released,
                "queues": {
                    q: {
                        "deleted": list(h.deleted),
                        "lanes": list(h.lanes),
                        "rewind": list(h.rewind),
                    }
                    for q, h in message.queues.items()
                },
                "handover": {
                    q: [
                        [
                            e.message_id,
                            e.seconds_left,
                            e.receive_count,
                            e.group,
                            e.attributes,
                            e.delivery,
                        ]
                        for e in entries
                    ]
                    for q, entries in message.handover.items()
                },
            }
        )
    )


def _bad(what: str) -> InvalidInput:
    return InvalidInput(f"malformed hints: {what}")


def _int(value: Any, lo: int, hi: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _bad(f"{what} must be an integer in {lo}..{hi}")
    return value


def _map(value: Any, what: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise _bad(f"{what} must be a map")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise _bad(f"{what} must be an array")
    return list(value)


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _bad("queue names must be non-empty strings")
    return value


def _entry(raw: Any) -> HandoverEntry:
    e = _list(raw, "a handover entry")
    if len(e) not in (4, 5, 6):
        raise _bad(
            "a handover entry is [id, seconds_left, receive_count, group, attributes, delivery]"
        )
    seconds = e[1]
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or not 0 <= seconds <= 43_200
    ):
        raise _bad("seconds_left must be a number in 0..43200")
    group = e[3]
    if group is not None and not isinstance(group, str):
        raise _bad("group must be a string or nil")
    attributes = e[4] if len(e) >= 5 else None
    if attributes is not None and not (
        isinstance(attributes, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in attributes.items())
    ):
        raise _bad("attributes must be a map of strings or nil")
    return HandoverEntry(
        _int(e[0], 0, MAX_ID, "id"),
        float(seconds),
        _int(e[2], 0, 2**31, "receive_count"),
        group,
        attributes,
        _int(e[5], 0, 2**64 - 1, "delivery") if len(e) == 6 else 0,
    )


def decode_hints(raw: bytes) -> HintsMessage:
    """Parse a hints message; :class:`InvalidInput` for any other shape."""
    try:
        data = msgpack.unpackb(raw, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise _bad("not msgpack") from exc
    data = _map(data, "the message")
    queues: dict[str, QueueHints] = {}
    for q, h in _map(data.get("queues", {}), "queues").items():
        h = _map(h, "a queue's hints")
        queues[_name(q)] = QueueHints(
            tuple(_int(i, 0, MAX_ID, "id") for i in _list(h.get("deleted", []), "deleted")),
            tuple(_int(x, 0, LANES - 1, "lane") for x in _list(h.get("lanes", []), "lanes")),
            tuple(_int(i, 0, MAX_ID, "id") for i in _list(h.get("rewind", []), "rewind")),
        )
    handover = {
        _name(q): tuple(_entry(e) for e in _list(entries, "a handover"))
        for q, entries in _map(data.get("handover", {}), "handover").items()
    }
    released_by = data.get("released_by")
    if released_by is not None:
        released_by = _name(released_by)
    recheck = tuple(_name(q) for q in _list(data.get("recheck", []), "recheck"))
    handoff_from = data.get("handoff_from")
    if handoff_from is not None:
        handoff_from = _name(handoff_from)
    return HintsMessage(queues, handover, released_by, recheck, handoff_from)


HANDOVER_CHUNK = 5_000
"""Entries per POST: a node with many messages in flight hands them over in pieces
that stay far below the peer's request size limit (one POST once got a 413)."""


def handover_chunks(
    queues: dict[str, list[HandoverEntry]], size: int = HANDOVER_CHUNK
) -> list[dict[str, tuple[HandoverEntry, ...]]]:
    """Split one peer's handover into messages of at most ``size`` entries."""
    chunks: list[dict[str, tuple[HandoverEntry, ...]]] = []
    current: dict[str, tuple[HandoverEntry, ...]] = {}
    room = size
    for queue, entries in queues.items():
        while entries:
            part, entries = entries[:room], entries[room:]
            current[queue] = current.get(queue, ()) + tuple(part)
            room -= len(part)
            if room == 0:
                chunks.append(current)
                current, room = {}, size
    if current:
        chunks.append(current)
    return chunks
