"""The batch API (the start of v2): many messages per request, JSON or msgpack.

Every response is an object with named members. In JSON, ids are decimal
strings; in msgpack, integers. See the README for the shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from dynaq.api.codec import body_from_wire, body_to_json, read_body, respond, wants_msgpack
from dynaq.api.keys import CATALOG, QUEUES, TOPICS
from dynaq.core.ids import is_valid_id
from dynaq.errors import InvalidInput
from dynaq.services.messages import Message, NewMessage
from dynaq.services.queues import QueueService, parse_id

routes = web.RouteTableDef()


def _object(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise InvalidInput("request body must be an object")
    return body


def _attributes(item: Mapping[str, Any], where: str) -> dict[str, str] | None:
    attrs = item.get("attributes")
    if attrs is None:
        return None
    if not isinstance(attrs, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in attrs.items()
    ):
        raise InvalidInput(f"{where}.attributes must be an object of string values")
    if len(attrs) > 32:
        raise InvalidInput(f"{where}.attributes holds at most 32 entries")
    return dict(attrs)


def _tag(item: Mapping[str, Any], name: str, where: str) -> str | None:
    value = item.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{where}.{name} must be a string")
    return value


def _plain_bodies(items: list[Any]) -> list[bytes] | None:
    """The bodies when every item is exactly ``{"body": <bytes>}``, else None.

    One comprehension instead of a checked loop: this is most of the parsing
    cost of a msgpack batch. Anything else takes the checked path.
    """
    try:
        bodies = [item["body"] for item in items if type(item) is dict and len(item) == 1]
    except KeyError:
        return None
    if len(bodies) != len(items) or not all(type(b) is bytes for b in bodies):
        return None
    return bodies


def _new_messages(body: Mapping[str, Any], binary: bool, max_batch: int) -> list[NewMessage]:
    items = body.get("messages")
    if not isinstance(items, list) or not items:
        raise InvalidInput("messages must be a non-empty array")
    if len(items) > max_batch:
        raise InvalidInput(f"a batch holds at most {max_batch} messages, got {len(items)}")
    if binary:
        bodies = _plain_bodies(items)
        if bodies is not None:  # the hot path: every item is {"body": <bytes>}
            return [NewMessage(b) for b in bodies]
    out: list[NewMessage] = []
    for i, item in enumerate(items):
        where = f"messages[{i}]"
        if not isinstance(item, Mapping):
            raise InvalidInput(f"{where} must be an object")
        out.append(
            NewMessage(
                body_from_wire(dict(item), binary, where),
                _attributes(item, where),
                group=_tag(item, "group", where),
                dedup_id=_tag(item, "dedup_id", where),
            )
        )
    return out


def _ids_member(body: Mapping[str, Any], max_batch: int) -> list[int]:
    ids = body.get("ids")
    if not isinstance(ids, list) or not ids:
        raise InvalidInput("ids must be a non-empty array")
    if len(ids) > max_batch:
        raise InvalidInput(f"at most {max_batch} ids per request, got {len(ids)}")
    out: list[int] = []
    for value in ids:
        if isinstance(value, bool):
            raise InvalidInput("ids must be integers or decimal strings")
        if isinstance(value, int):
            if not is_valid_id(value):
                raise InvalidInput(f"message id {value} is out of range [0, 2^63)")
            out.append(value)
        elif isinstance(value, str):
            out.append(parse_id(value))
        else:
            raise InvalidInput("ids must be integers or decimal strings")
    return out


def _timeout(body: Mapping[str, Any], name: str, required: bool) -> float | None:
    value = body.get(name)
    if value is None:
        if required:
            raise InvalidInput(f"{name} is required")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{name} must be a number")
    return float(value)


def _id_out(binary: bool, mid: int) -> int | str:
    return mid if binary else str(mid)


def _ids_out(binary: bool, ids: list[int]) -> list[int] | list[str]:
    return ids if binary else [str(i) for i in ids]


def _message_out(m: Message, binary: bool) -> dict[str, Any]:
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
    if m.attributes:
        out["attributes"] = m.attributes
    if m.group is not None:
        out["group"] = m.group
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
            "partitions": q.partition_count(info),
            "depth": q.depth(info),
            "in_flight": q.in_flight(info),
        },
    )


@routes.post("/v2/queues/{queue}/messages")
async def enqueue_batch(request: web.Request) -> web.Response:
    name = request.match_info["queue"]
    await request.app[CATALOG].queue(name)
    binary = wants_msgpack(request)
    q = _queues(request)
    messages = _new_messages(_object(await read_body(request)), binary, q.limits.max_batch)
    ids = await q.enqueue(name, messages)
    return respond(request, {"ids": _ids_out(binary, ids)}, binary=binary)


@routes.post("/v2/queues/{queue}/messages/receive")
async def receive_batch(request: web.Request) -> web.Response:
    name = request.match_info["queue"]
    await request.app[CATALOG].queue(name)
    body = _object(await read_body(request))
    n = body.get("max_messages", 1)
    if isinstance(n, bool) or not isinstance(n, int):
        raise InvalidInput("max_messages must be an integer")
    vt = _timeout(body, "visibility_timeout_s", required=False)
    wait = _timeout(body, "wait_time_s", required=False) or 0.0
    messages = await _queues(request).receive(name, n, vt, wait_time_s=wait)
    binary = wants_msgpack(request)
    out = [_message_out(m, binary) for m in messages]
    return respond(request, {"messages": out}, binary=binary)


@routes.post("/v2/queues/{queue}/messages/delete")
async def delete_batch(request: web.Request) -> web.Response:
    name = request.match_info["queue"]
    await request.app[CATALOG].queue(name)
    q = _queues(request)
    ids = _ids_member(_object(await read_body(request)), q.limits.max_batch)
    removed = await q.delete(name, ids)
    binary = wants_msgpack(request)
    return respond(
        request, {"deleted": len(removed), "ids": _ids_out(binary, removed)}, binary=binary
    )


@routes.post("/v2/queues/{queue}/messages/visibility")
async def change_visibility(request: web.Request) -> web.Response:
    name = request.match_info["queue"]
    await request.app[CATALOG].queue(name)
    q = _queues(request)
    body = _object(await read_body(request))
    ids = _ids_member(body, q.limits.max_batch)
    vt = _timeout(body, "visibility_timeout_s", required=True)
    assert vt is not None
    changed = await q.change_visibility(name, ids, vt)
    binary = wants_msgpack(request)
    return respond(request, {"changed": [_id_out(binary, i) for i in changed]})


@routes.post("/v2/topics/{topic}/messages")
async def publish_batch(request: web.Request) -> web.Response:
    topic = request.match_info["topic"]
    await request.app[CATALOG].topic(topic)
    binary = wants_msgpack(request)
    q = _queues(request)
    messages = _new_messages(_object(await read_body(request)), binary, q.limits.max_batch)
    result = await request.app[TOPICS].publish(topic, messages)
    return respond(
        request, {"ids": {name: [_id_out(binary, i) for i in ids] for name, ids in result.items()}}
    )
