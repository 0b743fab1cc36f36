"""Every API operation as data: which requests to send and how to read the answers.

No I/O here. :class:`~dynaq.client.Client` (blocking) and
:class:`~dynaq.client.AsyncClient` (asyncio) run the same :class:`Op` objects,
so both have the same surface and the same retry rules, defined once:

* ``Retry.ALWAYS`` -- sending the request twice cannot do its work twice
  (reads, deletes, visibility changes, settings, acks), or doing it twice is
  harmless (a receive whose answer was lost only hides its messages until
  their visibility timeout). Retried after any failure that says "retry".
* ``Retry.UNSENT`` -- a second send could store a second copy (enqueue,
  publish, opening a batch, adding items, ``decr``). Retried only when the
  request never left (the connection was refused) or the node refused it
  before doing anything (``node_not_serving``). An enqueue whose every
  message has a ``dedup_id`` is ``ALWAYS``: the node stores it once.
"""

from __future__ import annotations

import enum
import json
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from dynaq.client.types import (
    BatchCompletion,
    BatchInfo,
    BrowsePage,
    Health,
    ItemBlock,
    NewMessage,
    PartitionRange,
    PeekedMessage,
    QueueInfo,
    QueueSettings,
    ReceivedMessage,
    RingMember,
)
from dynaq.client.wire import MSGPACK, pack
from dynaq.errors import UnexpectedResponse

T = TypeVar("T")
U = TypeVar("U")

MAX_BATCH = 1000
"""Messages or ids per request (the server's default ``http.max_batch``)."""
MAX_WAIT_S = 20.0
"""The longest long poll a node accepts."""
JSON = "application/json"


class Retry(enum.Enum):
    """When a request may be sent again (see the module docstring)."""

    ALWAYS = "always"
    UNSENT = "unsent"


@dataclass(frozen=True)
class Call(Generic[T]):
    """One HTTP request and how to turn its decoded answer into a result."""

    method: str
    path: str
    read: Callable[[Any], T]
    body: bytes | None = None
    content_type: str | None = None
    retry: Retry = Retry.ALWAYS
    node: str | None = None
    """A specific node (``host:port``): no failover to other endpoints."""
    extra_timeout_s: float = 0.0
    """Added to the client's timeout (a long poll's wait)."""
    read_at: Callable[[Any, str], T] | None = None
    """Instead of ``read``: also given the address of the node that answered."""

    @property
    def what(self) -> str:
        return f"{self.method} {self.path}"

    def result(self, got: Any, addr: str) -> T:
        """``read`` of the decoded answer; an answer of the wrong shape is
        :class:`~dynaq.errors.UnexpectedResponse`, not a ``KeyError``."""
        try:
            return self.read(got) if self.read_at is None else self.read_at(got, addr)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise UnexpectedResponse(f"{self.what} at {addr}: unexpected answer ({exc!r})") from exc


@dataclass(frozen=True)
class Op(Generic[T]):
    """Calls run in order, then ``combine`` of their results (chunked batches)."""

    calls: Sequence[Call[Any]]
    combine: Callable[[list[Any]], T]


def single(call: Call[T]) -> Op[T]:
    return Op([call], lambda results: results[0])


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _json(body: Any) -> bytes:
    return json.dumps(body).encode()


def _none(_: Any) -> None:
    return None


def _none_list(_: Any) -> list[Any]:
    return []  # never called: the call reads with ``read_at``


def _chunks(items: Sequence[U], n: int = MAX_BATCH) -> list[Sequence[U]]:
    return [items[i : i + n] for i in range(0, len(items), n)] or [items[:0]]


def as_messages(messages: Sequence[NewMessage | bytes | str]) -> list[NewMessage]:
    return [m if isinstance(m, NewMessage) else NewMessage(m) for m in messages]


# cluster ---------------------------------------------------------------------


def health(node: str | None = None) -> Op[Health]:
    def read(got: Any) -> Health:
        return Health(str(got["status"]), str(got["node"]), int(got["members"]))

    return single(Call("GET", "/health", read, node=node))


def ring() -> Op[list[RingMember]]:
    def read(got: Any) -> list[RingMember]:
        return [
            RingMember(m["name"], m["http"], int(m["from_id"]), int(m["to_id"]))
            for m in got["members"]
        ]

    return single(Call("GET", "/v2/status/ring", read))


def partitions(queue: str, node: str | None = None) -> Op[list[PartitionRange]]:
    def read(got: Any) -> list[PartitionRange]:
        return [
            PartitionRange(got["node"], got["http"], p["index"], int(p["from_id"]), int(p["to_id"]))
            for p in got["partitions"]
        ]

    return single(Call("GET", f"/v2/queues/{_q(queue)}/partitions", read, node=node))


def snapshot_page(
    queue: str, from_id: int, to_id: int, limit: int, node: str | None
) -> Op[dict[str, Any]]:
    query = urllib.parse.urlencode({"from_id": from_id, "to_id": to_id, "limit": limit})
    return single(
        Call("GET", f"/v2/queues/{_q(queue)}/snapshot?{query}", lambda got: dict(got), node=node)
    )


def stream_size(stream: str) -> Op[int]:
    """How many entries the stream holds (its next index)."""
    return single(
        Call("GET", f"/v2/streams/{_q(stream)}?sizeonly=true", lambda got: int(got["size"]))
    )


def read_stream(stream: str, start: int, count: int) -> Op[list[dict[str, Any]]]:
    """Up to ``count`` entries from index ``start`` as ``{"index", "order", "entry"}``,
    answered at once with what is there (``nowait``: 204 when nothing is)."""
    query = urllib.parse.urlencode({"i": start, "n": count, "nowait": "true", "format": "array"})
    return single(Call("GET", f"/v2/streams/{_q(stream)}?{query}", lambda got: list(got or [])))


def browse(queue: str, from_id: int, limit: int, node: str | None) -> Op[BrowsePage]:
    """The snapshot page decoded into messages (it never locks)."""

    def read(page: Any) -> BrowsePage:
        n = int(page["count"])
        ids = _ints(page["ids"], n)
        times = _ints(page["enqueued_ms"], n)
        offsets = _ints(page["body_offsets"], n + 1, "i") if n else [0]
        bodies: bytes = page["bodies"]
        attrs = page.get("attributes") or [None] * n
        msgs = [
            PeekedMessage(ids[i], bodies[offsets[i] : offsets[i + 1]], times[i], attrs[i])
            for i in range(n)
        ]
        nxt = page.get("next_from_id")
        return BrowsePage(msgs, None if nxt is None else int(nxt))

    op = snapshot_page(queue, from_id, (1 << 63) - 1, limit, node)
    return single(Call(op.calls[0].method, op.calls[0].path, read, node=node))


def _ints(buf: bytes, n: int, kind: str = "q") -> list[int]:
    import struct

    return list(struct.unpack(f"<{n}{kind}", buf[: n * struct.calcsize(kind)]))


# queues ----------------------------------------------------------------------


def list_queues() -> Op[list[str]]:
    return single(Call("GET", "/v1/queues", lambda got: list(got["queues"])))


def create_queue(name: str, settings: QueueSettings | None) -> Op[None]:
    # PUT creates with the node's defaults; the settings follow as a PATCH.
    calls: list[Call[Any]] = [Call("PUT", f"/v1/queues/{_q(name)}", _none)]
    if settings is not None and settings.patch():
        calls.append(_patch_call(name, settings))
    return Op(calls, _none)


def _patch_call(name: str, settings: QueueSettings) -> Call[None]:
    body = _json(settings.patch())
    return Call("PATCH", f"/v1/queues/{_q(name)}", _none, body, JSON)


def configure_queue(name: str, settings: QueueSettings) -> Op[None]:
    return single(_patch_call(name, settings))


def describe_queue(name: str, node: str | None = None) -> Op[QueueInfo]:
    return single(Call("GET", f"/v2/queues/{_q(name)}", QueueInfo.from_wire, node=node))


def delete_queue(name: str) -> Op[None]:
    return single(Call("DELETE", f"/v1/queues/{_q(name)}", _none))


# messages --------------------------------------------------------------------


def enqueue(queue: str, messages: Sequence[NewMessage]) -> Op[list[int]]:
    return _send(f"/v2/queues/{_q(queue)}/messages", messages, _flatten)


def publish(topic: str, messages: Sequence[NewMessage]) -> Op[dict[str, list[int]]]:
    def merge(results: list[Any]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for got in results:
            for q, ids in got.items():
                out.setdefault(q, []).extend(int(i) for i in ids)
        return out

    return _send(f"/v2/topics/{_q(topic)}/messages", messages, merge)


def _flatten(results: list[Any]) -> list[int]:
    return [int(i) for got in results for i in got]


def _send(path: str, messages: Sequence[NewMessage], combine: Callable[[list[Any]], T]) -> Op[T]:
    calls = []
    for chunk in _chunks(messages):
        # Stored once per dedup window whatever happens: safe to resend.
        safe = bool(chunk) and all(m.dedup_id is not None for m in chunk)
        body = pack({"messages": [m.wire() for m in chunk]})
        retry = Retry.ALWAYS if safe else Retry.UNSENT
        calls.append(Call("POST", path, lambda got: got["ids"], body, MSGPACK, retry))
    return Op(calls, combine)


def receive(
    queue: str,
    max_messages: int,
    visibility_timeout_s: float | None,
    wait_time_s: float | None,
    node: str | None,
) -> Op[list[ReceivedMessage]]:
    body: dict[str, Any] = {"max_messages": max_messages}
    if visibility_timeout_s is not None:
        body["visibility_timeout_s"] = visibility_timeout_s
    if wait_time_s:
        body["wait_time_s"] = min(wait_time_s, MAX_WAIT_S)

    def read(got: Any, addr: str) -> list[ReceivedMessage]:
        return [
            ReceivedMessage(
                int(m["id"]),
                m["body"],
                m["enqueued_at_ms"],
                m["receive_count"],
                m.get("attributes"),
                m.get("group"),
                addr,
            )
            for m in got["messages"]
        ]

    path = f"/v2/queues/{_q(queue)}/messages/receive"
    call: Call[list[ReceivedMessage]] = Call(
        "POST",
        path,
        _none_list,
        pack(body),
        MSGPACK,
        node=node,
        extra_timeout_s=wait_time_s or 0,
        read_at=read,
    )
    return single(call)


def delete(queue: str, ids: Sequence[int], node: str | None = None) -> Op[int]:
    path = f"/v2/queues/{_q(queue)}/messages/delete"
    calls = [
        Call(
            "POST",
            path,
            lambda got: int(got["deleted"]),
            pack({"ids": list(c)}),
            MSGPACK,
            node=node,
        )
        for c in _chunks(ids)
    ]
    return Op(calls, sum)


def change_visibility(
    queue: str, ids: Sequence[int], visibility_timeout_s: float, node: str | None
) -> Op[list[int]]:
    path = f"/v2/queues/{_q(queue)}/messages/visibility"
    calls = [
        Call(
            "POST",
            path,
            lambda got: [int(i) for i in got["changed"]],
            pack({"ids": list(c), "visibility_timeout_s": visibility_timeout_s}),
            MSGPACK,
            node=node,
        )
        for c in _chunks(ids)
    ]
    return Op(calls, lambda results: [i for r in results for i in r])


def peek(queue: str, ids: Sequence[int]) -> Op[list[PeekedMessage]]:
    """v1's peek by ids: bodies only (no lock)."""

    def read(got: Any) -> list[PeekedMessage]:
        out = []
        for m in got["messages"]:
            raw = m["body"]
            if m.get("encoding") == "base64":
                import base64

                body = base64.b64decode(raw)
            else:
                body = raw.encode()
            out.append(PeekedMessage(int(m["id"]), body))
        return out

    calls = [
        Call("GET", f"/v1/queues/{_q(queue)}/message/{'%20'.join(str(i) for i in c)}", read)
        for c in _chunks(ids)
        if c
    ]
    return Op(calls, lambda results: [m for r in results for m in r])


# topics ----------------------------------------------------------------------


def list_topics() -> Op[list[str]]:
    return single(Call("GET", "/v1/topics", lambda got: list(got["topics"])))


def create_topic(name: str) -> Op[None]:
    return single(Call("PUT", f"/v1/topics/{_q(name)}", _none))


def topic_queues(name: str) -> Op[list[str]]:
    return single(Call("GET", f"/v1/topics/{_q(name)}", lambda got: list(got["Queues"])))


def delete_topic(name: str) -> Op[None]:
    return single(Call("DELETE", f"/v1/topics/{_q(name)}", _none))


def subscribe(topic: str, queue: str) -> Op[list[str]]:
    path = f"/v1/topics/{_q(topic)}/queues/{_q(queue)}"
    return single(Call("PUT", path, lambda got: list(got["Queues"])))


def unsubscribe(topic: str, queue: str) -> Op[list[str]]:
    path = f"/v1/topics/{_q(topic)}/queues/{_q(queue)}"
    return single(Call("DELETE", path, lambda got: list(got["Queues"])))


# batches ---------------------------------------------------------------------

EXACT = "/api/v1/batch/exact"
ESTIMATED = "/api/v1/batch/estimated"


def _base(mode: str) -> str:
    if mode not in ("exact", "estimated"):
        raise ValueError(f"mode must be 'exact' or 'estimated', got {mode!r}")
    return EXACT if mode == "exact" else ESTIMATED


def open_batch(mode: str, user_key: str | None) -> Op[int]:
    body = _json({} if user_key is None else {"userKey": user_key})
    call = Call("POST", _base(mode), lambda got: int(got["batchId"]), body, JSON, Retry.UNSENT)
    return single(call)


def add_items(batch_id: int, items: int) -> Op[list[ItemBlock]]:
    def read(got: Any) -> list[ItemBlock]:
        return [ItemBlock(batch_id, str(b["id"]), int(b["upto"])) for b in got["batchItemGroupIds"]]

    body = _json({"batchId": batch_id, "items": items})
    return single(Call("POST", EXACT + "/items", read, body, JSON, Retry.UNSENT))


def _completions(got: Any) -> list[BatchCompletion]:
    return [BatchCompletion.from_wire(c) for c in got["batchCompletions"]]


def ack_items(item_ids: Sequence[str]) -> Op[list[BatchCompletion]]:
    calls = [
        Call("POST", EXACT + "/items/ack", _completions, _json({"batchItemIds": list(c)}), JSON)
        for c in _chunks(item_ids, 10_000)
    ]
    return Op(calls, lambda results: [c for r in results for c in r])


def close_batch(batch_id: int, mode: str) -> Op[bool]:
    path = f"{EXACT}/close/{batch_id}" if mode == "exact" else f"{_base(mode)}/{batch_id}/close"
    return single(Call("POST", path, lambda got: bool(got["isComplete"])))


def describe_batch(batch_id: int, mode: str) -> Op[BatchInfo]:
    return single(Call("GET", f"{_base(mode)}/{batch_id}", BatchInfo.from_wire))


def delete_batch(batch_id: int, mode: str) -> Op[int]:
    path = f"{_base(mode)}/{batch_id}"
    return single(Call("DELETE", path, lambda got: int(got["itemsRemoved"])))


def remove_batches(mode: str, state: str, since_ms: int) -> Op[tuple[int, int]]:
    if state not in ("open", "closed"):
        raise ValueError(f"state must be 'open' or 'closed', got {state!r}")

    def read(got: Any) -> tuple[int, int]:
        return int(got["batchesRemoved"]), int(got["itemsRemoved"])

    return single(Call("DELETE", f"{_base(mode)}/{state}?since={since_ms}", read))


def incr_batch(batch_id: int, by: int) -> Op[BatchInfo]:
    path = f"{ESTIMATED}/{batch_id}/incr?by={by}"
    return single(Call("POST", path, BatchInfo.from_wire, retry=Retry.UNSENT))


def decr_batches(acks: Mapping[int, int]) -> Op[list[BatchCompletion]]:
    body = _json({"acks": [{"batchId": b, "by": n} for b, n in acks.items()]})
    return single(Call("POST", ESTIMATED + "/decr", _completions, body, JSON, Retry.UNSENT))
