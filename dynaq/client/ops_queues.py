"""Queue and message operations as data (see :mod:`dynaq.client.ops` for the retry rules)."""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from typing import Any

from dynaq.client.ops import (
    JSON,
    Call,
    Op,
    Retry,
    chunked,
    finite,
    flatten_ids,
    json_bytes,
    nothing,
    quoted,
    send_messages,
    single,
    snapshot_page,
)
from dynaq.client.types import (
    BrowsePage,
    MessageLike,
    PeekedMessage,
    QueueInfo,
    QueueSettings,
    ReceivedMessage,
    TxnDelete,
    TxnEnqueue,
    TxnResult,
)
from dynaq.client.wire import MSGPACK, pack


def _nothing_list(_: Any) -> list[Any]:
    return []  # never called: the call reads with ``read_at``


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
    return list(struct.unpack(f"<{n}{kind}", buf[: n * struct.calcsize(kind)]))


# queues ----------------------------------------------------------------------


def list_queues() -> Op[list[str]]:
    return single(Call("GET", "/v1/queues", lambda got: list(got["queues"])))


def create_queue(name: str, settings: QueueSettings | None) -> Op[None]:
    # The settings ride in the PUT: the queue is created with them in one write.
    patch = settings.patch() if settings is not None else None
    if patch:
        return single(Call("PUT", f"/v1/queues/{quoted(name)}", nothing, json_bytes(patch), JSON))
    return single(Call("PUT", f"/v1/queues/{quoted(name)}", nothing))


def _patch_call(name: str, settings: QueueSettings) -> Call[None]:
    body = json_bytes(settings.patch())
    return Call("PATCH", f"/v1/queues/{quoted(name)}", nothing, body, JSON)


def configure_queue(name: str, settings: QueueSettings) -> Op[None]:
    return single(_patch_call(name, settings))


def describe_queue(name: str, node: str | None = None) -> Op[QueueInfo]:
    return single(Call("GET", f"/v2/queues/{quoted(name)}", QueueInfo.from_wire, node=node))


def delete_queue(name: str) -> Op[None]:
    return single(Call("DELETE", f"/v1/queues/{quoted(name)}", nothing))


# messages --------------------------------------------------------------------


def enqueue(queue: str, messages: Sequence[MessageLike]) -> Op[list[int]]:
    return send_messages(f"/v2/queues/{quoted(queue)}/messages", messages, flatten_ids)


def receive(
    queue: str,
    max_messages: int,
    visibility_timeout_s: float | None,
    wait_time_s: float | None,
    node: str | None,
    max_per_group: int = 1,
) -> Op[list[ReceivedMessage]]:
    finite("visibility_timeout_s", visibility_timeout_s)
    finite("wait_time_s", wait_time_s)
    body: dict[str, Any] = {"max_messages": max_messages}
    if max_per_group != 1:
        body["max_per_group"] = max_per_group
    if visibility_timeout_s is not None:
        body["visibility_timeout_s"] = visibility_timeout_s
    if wait_time_s is not None:
        # As given: the node checks its range (0..20 s), and refuses one outside it
        # with InvalidInput, as it does a negative one (never clamped here). An
        # explicit 0 does not wait, whatever the queue's receive_wait_s (None: it).
        body["wait_time_s"] = wait_time_s

    def read(got: Any, addr: str) -> list[ReceivedMessage]:
        from_wire = ReceivedMessage.from_wire
        return [from_wire(m, addr) for m in got["messages"]]

    path = f"/v2/queues/{quoted(queue)}/messages/receive"
    call: Call[list[ReceivedMessage]] = Call(
        "POST",
        path,
        _nothing_list,
        pack(body),
        MSGPACK,
        node=node,
        extra_timeout_s=max(wait_time_s or 0.0, 0.0),
        read_at=read,
    )
    return single(call)


def delete(queue: str, ids: Sequence[int], node: str | None = None) -> Op[int]:
    path = f"/v2/queues/{quoted(queue)}/messages/delete"
    calls = [
        Call(
            "POST",
            path,
            lambda got: int(got["deleted"]),
            pack({"ids": list(c)}),
            MSGPACK,
            node=node,
        )
        for c in chunked(ids)
    ]
    return Op(calls, sum)


def change_visibility(
    queue: str, ids: Sequence[int], visibility_timeout_s: float, node: str | None
) -> Op[list[int]]:
    finite("visibility_timeout_s", visibility_timeout_s)
    path = f"/v2/queues/{quoted(queue)}/messages/visibility"
    calls = [
        Call(
            "POST",
            path,
            lambda got: [int(i) for i in got["changed"]],
            pack({"ids": list(c), "visibility_timeout_s": visibility_timeout_s}),
            MSGPACK,
            node=node,
        )
        for c in chunked(ids)
    ]
    return Op(calls, lambda results: [i for r in results for i in r])


def peek(queue: str, ids: Sequence[int]) -> Op[list[PeekedMessage]]:
    """v1's peek by ids: bodies only (no lock)."""

    def read(got: Any) -> list[PeekedMessage]:
        out = []
        for m in got["messages"]:
            raw = m["body"]
            body = base64.b64decode(raw) if m.get("encoding") == "base64" else raw.encode()
            out.append(PeekedMessage(int(m["id"]), body))
        return out

    calls = [
        Call("GET", f"/v1/queues/{quoted(queue)}/message/{'%20'.join(str(i) for i in c)}", read)
        for c in chunked(ids)
        if c
    ]
    return Op(calls, lambda results: [m for r in results for m in r])


def transact(deletes: Sequence[TxnDelete], enqueues: Sequence[TxnEnqueue]) -> Op[TxnResult]:
    """Delete received messages (by receipt) and enqueue outputs, all or nothing: one
    ``POST /v2/transactions`` (never split).

    Raises :class:`~dynaq.errors.StaleReceipts` (its ``receipts``) when a receipt
    is not current (received again since, expired, or deleted): nothing was
    applied. Outputs whose ``dedup_id`` is already stored come back ``duplicate``.

    Resent after any retriable failure only when every output has a dedup id (and
    there is one): a retry of a transaction that committed is then answered as a
    replay. Otherwise only when it never left (it could enqueue twice).
    """
    body = pack({"delete": [d.wire() for d in deletes], "enqueue": [e.wire() for e in enqueues]})
    safe = bool(enqueues) and all(e.dedup_id is not None for e in enqueues)
    retry = Retry.ALWAYS if safe else Retry.UNSENT
    return single(Call("POST", "/v2/transactions", TxnResult.from_wire, body, MSGPACK, retry))
