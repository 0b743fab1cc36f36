"""The batch API (the start of v2): many messages per request, JSON or msgpack.

Every response is an object with named members. In JSON, ids are decimal
strings; in msgpack, integers. See the README for the shapes.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from dynaq.api.auth import require_batch_tags
from dynaq.api.bulk import node_partition_count
from dynaq.api.codec import (
    SMALL_BODY_BYTES,
    body_to_json,
    caller_waiting,
    read_body,
    respond,
    sends_msgpack,
    wants_msgpack,
)
from dynaq.api.keys import CATALOG, QUEUES, TOPICS
from dynaq.api.message_params import SEND_MEMBERS, new_messages
from dynaq.api.params import (
    DELETE_MEMBERS,
    RECEIVE_MEMBERS,
    VISIBILITY_MEMBERS,
    body_object,
    ids_and_receipts,
    max_messages,
    optional_seconds,
    required_seconds,
)
from dynaq.core.messages import Message
from dynaq.core.receipts import decode_receipt, encode_receipt, encode_receipts
from dynaq.errors import InvalidInput
from dynaq.services.queues import QueueService

routes = web.RouteTableDef()


def _id_out(binary: bool, mid: int) -> int | str:
    return mid if binary else str(mid)


def _ids_out(binary: bool, ids: list[int]) -> list[int] | list[str]:
    return ids if binary else [str(i) for i in ids]


def _message_out(m: Message, binary: bool, receipt: str | None = None) -> dict[str, Any]:
    out: dict[str, Any]
    if binary:
        out = {
            "id": m.id,
            "body": m.body,
            "enqueued_at_ms": m.enqueued_ms,
            "receive_count": m.receive_count,
        }
    else:
        out = {"id": str(m.id), **body_to_json(m.body)}
        out["enqueued_at_ms"] = m.enqueued_ms
        out["receive_count"] = m.receive_count
    if receipt is not None:
        out["receipt"] = receipt
    elif m.delivery:
        out["receipt"] = encode_receipt(m.id, m.delivery)
    if m.attributes:
        out["attributes"] = m.attributes
    if m.group is not None:
        out["group"] = m.group
    if m.origin is not None:
        o = m.origin
        out["origin"] = {
            "queue": o.queue,
            "id": _id_out(binary, o.message_id),
            "receive_count": o.receive_count,
            "enqueued_at_ms": o.enqueued_ms,
            "dead_lettered_at_ms": o.dead_lettered_ms,
        }
    return out


def _queues(request: web.Request) -> QueueService:
    return request.app[QUEUES]


@routes.get("/v2/queues/{queue}")
async def describe_queue(request: web.Request) -> web.Response:
    info = await request.app[CATALOG].queue(request.match_info["queue"])
    q = _queues(request)
    s = info.settings
    return respond(
        request,
        {
            "name": info.name,
            "visibility_timeout_s": s.visibility_timeout_s,
            "min_partitions": s.min_partitions,
            "max_partitions": s.max_partitions,
            "max_partition_age_s": s.max_partition_age_s,
            "compressed_messages": s.compressed_messages,
            "redrive_policy": None
            if s.redrive_policy is None
            else {
                "dead_letter_queue": s.redrive_policy.dead_letter_queue,
                "max_receive_count": s.redrive_policy.max_receive_count,
            },
            "delay_s": s.delay_s,
            "retention_s": s.retention_s,
            "receive_wait_s": s.receive_wait_s,
            "max_message_bytes": s.max_message_bytes,
            "fifo": s.fifo,
            "content_based_dedup": s.content_based_dedup,
            "tags": dict(s.tags),
            "partitions": await node_partition_count(request, info),
            "depth": await q.depth(info),
            **await q.ring_stats(info),
        },
    )


@routes.post("/v2/queues/{queue}/messages")
async def enqueue_batch(request: web.Request) -> web.Response:
    # The body first: a slow body must not carry a queue looked up before a delete.
    body = body_object(await read_body(request), SEND_MEMBERS)
    info = await request.app[CATALOG].queue(request.match_info["queue"])
    q = _queues(request)
    messages = new_messages(body, sends_msgpack(request), q.limits.max_batch)
    require_batch_tags(request, messages)
    ids = await q.enqueue(info, messages)
    binary = wants_msgpack(request)
    return respond(request, {"ids": _ids_out(binary, ids)}, binary=binary)


@routes.post("/v2/queues/{queue}/messages/receive")
async def receive_batch(request: web.Request) -> web.Response:
    info = await request.app[CATALOG].queue(request.match_info["queue"])
    body = body_object(await read_body(request, SMALL_BODY_BYTES), RECEIVE_MEMBERS)
    n = max_messages(body)
    per_group = max_messages(body, "max_per_group")
    if not 1 <= per_group <= n:
        raise InvalidInput("max_per_group must be an integer in 1..max_messages")
    vt = optional_seconds(body, "visibility_timeout_s")
    wait = optional_seconds(body, "wait_time_s")
    if wait is None:
        wait = info.settings.receive_wait_s  # the queue's default long poll
    queues = _queues(request)
    messages = await queues.receive(info.name, n, vt, wait, caller_waiting(request), per_group)
    binary = wants_msgpack(request)
    if all(m.delivery for m in messages):  # every receive draws a delivery: one pass
        receipts = encode_receipts([(m.id, m.delivery) for m in messages])
        out = [_message_out(m, binary, r) for m, r in zip(messages, receipts, strict=True)]
    else:
        out = [_message_out(m, binary) for m in messages]
    return respond(request, {"messages": out}, binary=binary)


def _refused(binary: bool, stale: list[int], receipts: dict[int, str]) -> list[dict[str, Any]]:
    return [
        {
            "receipt": receipts[i],
            "id": _id_out(binary, i),
            "code": "stale_receipt",
            "error": "the message was received again since this receipt was handed out",
        }
        for i in stale
    ]


@routes.post("/v2/queues/{queue}/messages/delete")
async def delete_batch(request: web.Request) -> web.Response:
    info = await request.app[CATALOG].queue(request.match_info["queue"])
    q = _queues(request)
    body = body_object(await read_body(request, SMALL_BODY_BYTES), DELETE_MEMBERS)
    ids, receipts = ids_and_receipts(body, q.limits.max_batch)
    removed = await q.delete(info, ids) if ids else []
    binary = wants_msgpack(request)
    out: dict[str, Any] = {}
    if receipts:
        got, stale = await q.receipts.delete(info, [decode_receipt(r) for r in receipts.values()])
        removed = list(dict.fromkeys([*removed, *got]))
        out["refused"] = _refused(binary, stale, receipts)
    out = {"deleted": len(removed), "ids": _ids_out(binary, removed), **out}
    return respond(request, out, binary=binary)


@routes.post("/v2/queues/{queue}/messages/visibility")
async def change_visibility(request: web.Request) -> web.Response:
    info = await request.app[CATALOG].queue(request.match_info["queue"])
    q = _queues(request)
    body = body_object(await read_body(request, SMALL_BODY_BYTES), VISIBILITY_MEMBERS)
    ids, receipts = ids_and_receipts(body, q.limits.max_batch)
    vt = required_seconds(body, "visibility_timeout_s")
    changed = await q.change_visibility(info, ids, vt) if ids else []
    binary = wants_msgpack(request)
    out: dict[str, Any] = {}
    if receipts:
        pairs = [decode_receipt(r) for r in receipts.values()]
        got, stale = await q.receipts.change_visibility(info, pairs, vt)
        changed = list(dict.fromkeys([*changed, *got]))
        out["refused"] = _refused(binary, stale, receipts)
    return respond(request, {"changed": [_id_out(binary, i) for i in changed], **out})


@routes.post("/v2/topics/{topic}/messages")
async def publish_batch(request: web.Request) -> web.Response:
    topic = request.match_info["topic"]
    body = body_object(await read_body(request), SEND_MEMBERS)
    await request.app[CATALOG].topic(topic)
    q = _queues(request)
    messages = new_messages(body, sends_msgpack(request), q.limits.max_batch)
    require_batch_tags(request, messages)
    result = await request.app[TOPICS].publish(topic, messages)
    binary = wants_msgpack(request)
    return respond(
        request, {"ids": {name: [_id_out(binary, i) for i in ids] for name, ids in result.items()}}
    )
