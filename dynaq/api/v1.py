"""Dynamiq's v1 REST API, route for route (see ``reference/dynamiq-api.md``)."""

from __future__ import annotations

from aiohttp import web

from dynaq.api.auth import require_batch_tags, require_dead_letter_write
from dynaq.api.bulk import node_partition_count
from dynaq.api.codec import body_to_json, expect_within, json_response, parse_json, read_raw
from dynaq.api.keys import CATALOG, QUEUES, TOPICS, VIEW, WORKER_OF
from dynaq.api.params import (
    batch_size,
    id_list,
    parse_id,
    settings_patch,
    subscription_options,
)
from dynaq.core.batch_items import BATCH_ITEM_ATTRIBUTE, parse_item_id
from dynaq.core.keyspace import FULL_RANGE
from dynaq.core.messages import Message, NewMessage
from dynaq.errors import InvalidInput, NotFound, PayloadTooLarge
from dynaq.services.catalog import QueueInfo, TopicInfo

routes = web.RouteTableDef()


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _message_json(m: Message) -> dict[str, str]:
    return {"id": str(m.id), **body_to_json(m.body)}


def _query_once(request: web.Request, name: str) -> str | None:
    """Query parameter ``name``, or None when absent; refused (422) when given twice,
    even with equal values: no copy is silently preferred to another."""
    values = request.query.getall(name, [])
    if len(values) > 1:
        raise InvalidInput(f"query parameter {name} is given {len(values)} times; give it once")
    return values[0] if values else None


def _new_message(request: web.Request, body: bytes) -> NewMessage:
    """A raw-body message; ``?batch_item_id=`` (or ``X-Dynaq-Batch-Item``) tags it
    with a batch item, acked when the message is deleted (a dynaq extension)."""
    given = [
        v
        for v in (_query_once(request, "batch_item_id"), request.headers.get("X-Dynaq-Batch-Item"))
        if v is not None
    ]
    for item in given:
        if not item.isascii():  # header bytes that are not text arrive surrogate-escaped
            raise InvalidInput("batch item ids are ASCII: 'batchId:blockId:index'")
        parse_item_id(item)
    if not given:
        return NewMessage(body)
    if len(set(given)) > 1:
        raise InvalidInput("batch_item_id and X-Dynaq-Batch-Item name different items")
    return NewMessage(body, {BATCH_ITEM_ATTRIBUTE: given[0]})


# status ----------------------------------------------------------------------


@routes.get("/v1/status/servers")
async def servers(request: web.Request) -> web.Response:
    view = request.app[VIEW]
    lines = [f"Member: {m.name} {m.http_addr}" for m in view.members]
    if (of := request.app.get(WORKER_OF)) is not None:
        # A node of several workers is one member to its clients, at the node's
        # address (its workers: GET /v2/status/workers).
        lines = [f"Member: {of.node} {of.http}"]
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")


@routes.get("/v1/status/partitionrange")
async def partition_range(request: web.Request) -> web.Response:
    # A node of several workers is one node, alone (workers join no ring of
    # machines): its slice is the whole keyspace, whichever worker answers.
    s = FULL_RANGE if WORKER_OF in request.app else request.app[VIEW].my_slice
    return json_response({"bottom": str(s.bottom_id), "top": str(s.top_id)})


# topics ------------------------------------------------------------------------


@routes.get("/v1/topics")
async def list_topics(request: web.Request) -> web.Response:
    return json_response({"topics": await request.app[CATALOG].listed_topic_names()})


@routes.put("/v1/topics/{topic}")
async def create_topic(request: web.Request) -> web.Response:
    await request.app[CATALOG].create_topic(request.match_info["topic"])
    return json_response({"Queues": []}, 201)


@routes.get("/v1/topics/{topic}")
async def get_topic(request: web.Request) -> web.Response:
    info = await request.app[CATALOG].topic(request.match_info["topic"])
    return json_response(_topic_json(info))


@routes.delete("/v1/topics/{topic}")
async def delete_topic(request: web.Request) -> web.Response:
    await request.app[CATALOG].delete_topic(request.match_info["topic"])
    return json_response({"Deleted": True})


def _topic_json(info: TopicInfo) -> dict[str, object]:
    out: dict[str, object] = {"Queues": list(info.queues)}
    if info.subscriptions:
        out["Subscriptions"] = {
            q: {
                "filter_policy": o.filter_policy,
                "filter_scope": o.filter_scope,
                "raw_delivery": o.raw,
            }
            for q, o in info.subscriptions.items()
        }
    return out


@routes.put("/v1/topics/{topic}/queues/{queue}")
async def subscribe(request: web.Request) -> web.Response:
    raw = await read_raw(request)
    options = subscription_options(parse_json(raw)) if raw.strip() else None
    try:
        info = await request.app[CATALOG].subscribe(
            request.match_info["topic"], request.match_info["queue"], options
        )
    except NotFound as exc:  # the contract answers 422 here, not 404
        raise InvalidInput(exc.message) from None
    return json_response(_topic_json(info))


@routes.delete("/v1/topics/{topic}/queues/{queue}")
async def unsubscribe(request: web.Request) -> web.Response:
    info = await request.app[CATALOG].unsubscribe(
        request.match_info["topic"], request.match_info["queue"]
    )
    return json_response({"Queues": list(info.queues)})


def _message_limit(request: web.Request) -> int:
    return request.app[QUEUES].limits.max_message_bytes


def _refuse_declared_oversize(request: web.Request) -> int:
    """The message size limit; 413 when ``Content-Length`` already says the body is
    over it, before a byte of the body is read (``Expect: 100-continue`` is refused
    the same way, by the route's ``expect_within(_message_limit)``)."""
    limit = _message_limit(request)
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(
            f"message body is {request.content_length} bytes; the limit is {limit}"
        )
    return limit


@routes.put("/v1/topics/{topic}/message", expect_handler=expect_within(_message_limit))
async def publish(request: web.Request) -> web.Response:
    """One message to every subscribed queue. Bounded like the queue route: the body
    (decoded from its ``Content-Encoding``) is at most the message size limit, refused
    from its ``Content-Length`` before it is read and cut off once decoding passes it."""
    topic = request.match_info["topic"]
    limit = _refuse_declared_oversize(request)
    await request.app[CATALOG].topic(topic)  # 404 before reading a body for nothing
    body = await read_raw(request, limit)
    message = _new_message(request, body)
    require_batch_tags(request, [message])
    result = await request.app[TOPICS].publish(topic, [message])
    return json_response({q: str(ids[0]) for q, ids in result.items()})


# queues ------------------------------------------------------------------------


@routes.get("/v1/queues")
async def list_queues(request: web.Request) -> web.Response:
    return json_response({"queues": await request.app[CATALOG].listed_queue_names()})


@routes.put("/v1/queues/{queue}")
async def create_queue(request: web.Request) -> web.Response:
    # An optional body (the PATCH body's settings) is applied in the same write:
    # the queue never exists, on any node, without them.
    raw = await read_raw(request)
    settings = settings_patch(parse_json(raw)) if raw.strip() else None
    if settings:
        require_dead_letter_write(request, settings)
    await request.app[CATALOG].create_queue(request.match_info["queue"], settings)
    return json_response("created", 201)


async def _queue_json(request: web.Request, info: QueueInfo) -> dict[str, object]:
    s = info.settings
    return {
        "VisibilityTimeout": _number(s.visibility_timeout_s),
        "MinPartitions": s.min_partitions,
        "MaxPartitions": s.max_partitions,
        "MaxPartitionAge": _number(s.max_partition_age_s),
        "CompressedMessages": s.compressed_messages,
        "partitions": await node_partition_count(request, info),
    }


@routes.get("/v1/queues/{queue}")
async def get_queue(request: web.Request) -> web.Response:
    info = await request.app[CATALOG].queue(request.match_info["queue"])
    return json_response(await _queue_json(request, info))


@routes.patch("/v1/queues/{queue}")
async def configure_queue(request: web.Request) -> web.Response:
    name = request.match_info["queue"]
    await request.app[CATALOG].queue(name)
    changes = settings_patch(parse_json(await read_raw(request)))
    require_dead_letter_write(request, changes)
    await request.app[CATALOG].update_queue(name, changes)
    return json_response("ok")


@routes.delete("/v1/queues/{queue}")
async def delete_queue(request: web.Request) -> web.Response:
    await request.app[CATALOG].delete_queue(request.match_info["queue"])
    return json_response({"Deleted": True})


@routes.put("/v1/queues/{queue}/message", expect_handler=expect_within(_message_limit))
async def enqueue(request: web.Request) -> web.Response:
    queues = request.app[QUEUES]
    limit = _refuse_declared_oversize(request)
    body = await read_raw(request, limit)
    # Looked up after the body arrived: a slow body must not carry a queue
    # resolved before a delete into the old queue number.
    info = await request.app[CATALOG].queue(request.match_info["queue"])
    message = _new_message(request, body)
    require_batch_tags(request, [message])
    (mid,) = await queues.enqueue(info, [message])
    return web.Response(text=str(mid), content_type="text/plain")


# Two methods share each of the next two path shapes, so each shape names its
# last segment once: OpenAPI (``dynaq.api.openapi``) allows one name per shape.
# No automatic HEAD twin: a receive changes state (it locks what it returns).
@routes.get("/v1/queues/{queue}/messages/{batch_size_or_ids}", allow_head=False)
async def receive(request: web.Request) -> web.Response:
    text = request.match_info["batch_size_or_ids"]
    queues = request.app[QUEUES]
    n = batch_size(text, queues.limits.max_batch)
    messages = await queues.receive(request.match_info["queue"], n)
    return json_response([_message_json(m) for m in messages])


@routes.get("/v1/queues/{queue}/message/{ids}")
async def peek(request: web.Request) -> web.Response:
    info = await request.app[CATALOG].queue(request.match_info["queue"])
    queues = request.app[QUEUES]
    messages = await queues.peek(info, id_list(request.match_info["ids"], queues.limits.max_batch))
    return json_response({"messages": [_message_json(m) for m in messages]})


@routes.delete("/v1/queues/{queue}/message/{ids}")
async def delete_message(request: web.Request) -> web.Response:
    """Deletes one message: the segment is named as the peek route's, but holds one id."""
    info = await request.app[CATALOG].queue(request.match_info["queue"])
    removed = await request.app[QUEUES].delete(info, [parse_id(request.match_info["ids"])])
    return json_response(bool(removed))


@routes.delete("/v1/queues/{queue}/messages/{batch_size_or_ids}")
async def delete_messages(request: web.Request) -> web.Response:
    info = await request.app[CATALOG].queue(request.match_info["queue"])
    ids = id_list(request.match_info["batch_size_or_ids"], request.app[QUEUES].limits.max_batch)
    removed = await request.app[QUEUES].delete(info, ids)
    return json_response({"deleted": len(removed)})
