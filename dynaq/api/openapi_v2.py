"""The OpenAPI paths of the batch API (:mod:`dynaq.api.v2`) and the bulk reads
(:mod:`dynaq.api.bulk`)."""

from __future__ import annotations

from dynaq.api.openapi_common import (
    QUEUE,
    TOPIC,
    Obj,
    SpecLimits,
    body,
    errors,
    link,
    operation,
    query_param,
    ref,
    response,
)
from dynaq.api.openapi_queues import queue_description_extensions
from dynaq.core.ids import MAX_ID
from dynaq.services.snapshots import MAX_PAGE

TAG = "v2"

_QUEUE_LINK = {"queue": "$request.path.queue"}
_NEGOTIATED = (
    "Request bodies are JSON or msgpack (by Content-Type); the answer follows Accept "
    "(else the request's Content-Type). In JSON ids are decimal strings and bodies UTF-8 "
    "text or base64 (`encoding`); in msgpack ids are integers and bodies raw bytes."
)


def _obj(required: list[str], **props: Obj) -> Obj:
    return {
        "type": "object",
        "required": required,
        "properties": props,
        "additionalProperties": False,
    }


def _array(items: Obj, max_items: int | None = None) -> Obj:
    out: Obj = {"type": "array", "items": items}
    if max_items is not None:
        out["maxItems"] = max_items
    return out


def _negotiated_body(json: Obj, msgpack: Obj) -> Obj:
    return body(json=json, msgpack=msgpack)


def _queue_description() -> Obj:
    number = {"type": "number", "minimum": 0}
    count = {"type": "integer", "minimum": 0}
    return _obj(
        [
            "name",
            "visibility_timeout_s",
            "min_partitions",
            "max_partitions",
            "max_partition_age_s",
            "compressed_messages",
            "redrive_policy",
            "delay_s",
            "retention_s",
            "partitions",
            "depth",
            "in_flight",
        ],
        name=ref("Name"),
        visibility_timeout_s=number,
        min_partitions={"type": "integer", "minimum": 1},
        max_partitions={"type": "integer", "minimum": 1},
        max_partition_age_s=number,
        compressed_messages={"type": "boolean"},
        **queue_description_extensions(),
        partitions=count,
        depth=count,
        in_flight=count,
    )


def _v2_paths(limits: SpecLimits) -> Obj:
    n = limits.max_batch
    ids_json = _array(ref("MessageId"), n)
    ids_msgpack = _array(ref("MessageIdInt"), n)
    enqueue_errors = errors(404, 413, 415, 422, 503)
    return {
        "/v2/queues/{queue}": {
            "parameters": [QUEUE],
            "get": operation(
                "v2DescribeQueue",
                "A queue's settings and counts",
                TAG,
                {
                    "200": response(
                        "Settings, partitions, depth and in-flight count.",
                        json=_queue_description(),
                        msgpack=_queue_description(),
                    ),
                    **errors(404, 503),
                },
            ),
        },
        "/v2/queues/{queue}/messages": {
            "parameters": [QUEUE],
            "post": operation(
                "v2Enqueue",
                "Enqueue a batch of messages",
                TAG,
                {
                    "200": response(
                        "One id per message, in order (a dedup hit gives the first id).",
                        json=_obj(["ids"], ids=ids_json),
                        msgpack=_obj(["ids"], ids=ids_msgpack),
                        links={
                            "Delete": link(
                                "v2Delete",
                                "Delete them",
                                parameters=_QUEUE_LINK,
                                request_body={"ids": "$response.body#/ids"},
                            ),
                            "Receive": link("v2Receive", "Receive", parameters=_QUEUE_LINK),
                            "Peek": link(
                                "v1Peek",
                                "Peek at the first",
                                parameters={**_QUEUE_LINK, "ids": "$response.body#/ids/0"},
                            ),
                            "Snapshot": link("v2Snapshot", "Page", parameters=_QUEUE_LINK),
                        },
                    ),
                    **enqueue_errors,
                },
                body=_negotiated_body(ref("EnqueueRequest"), ref("EnqueueRequestMsgpack")),
                description=_NEGOTIATED,
            ),
        },
        "/v2/queues/{queue}/messages/receive": {
            "parameters": [QUEUE],
            "post": operation(
                "v2Receive",
                "Receive up to max_messages messages (long poll with wait_time_s)",
                TAG,
                {
                    "200": response(
                        "The messages, now invisible for the visibility timeout.",
                        json=_obj(["messages"], messages=_array(ref("ReceivedMessage"), n)),
                        msgpack=_obj(
                            ["messages"], messages=_array(ref("ReceivedMessageMsgpack"), n)
                        ),
                        links={
                            "Delete": link(
                                "v2Delete",
                                "Delete the first",
                                parameters=_QUEUE_LINK,
                                request_body={"ids": ["$response.body#/messages/0/id"]},
                            ),
                            "Release": link(
                                "v2Visibility",
                                "Release the first",
                                parameters=_QUEUE_LINK,
                                request_body={
                                    "ids": ["$response.body#/messages/0/id"],
                                    "visibility_timeout_s": 0,
                                },
                            ),
                        },
                    ),
                    **errors(404, 413, 415, 422, 503),
                },
                body=_negotiated_body(ref("ReceiveRequest"), ref("ReceiveRequest")),
                description=_NEGOTIATED,
            ),
        },
        "/v2/queues/{queue}/messages/delete": {
            "parameters": [QUEUE],
            "post": operation(
                "v2Delete",
                "Delete messages by id or by receipt",
                TAG,
                {
                    "200": response(
                        "How many existed, and which; receipts refused as stale.",
                        json=_obj(
                            ["deleted", "ids"],
                            deleted={"type": "integer"},
                            ids=ids_json,
                            refused=_array(ref("RefusedReceipt"), n),
                        ),
                        msgpack=_obj(
                            ["deleted", "ids"],
                            deleted={"type": "integer"},
                            ids=ids_msgpack,
                            refused=_array(ref("RefusedReceipt"), n),
                        ),
                    ),
                    **errors(404, 413, 415, 422, 503),
                },
                body=_negotiated_body(ref("DeleteRequest"), ref("DeleteRequest")),
                description=_NEGOTIATED,
            ),
        },
        "/v2/queues/{queue}/messages/visibility": {
            "parameters": [QUEUE],
            "post": operation(
                "v2Visibility",
                "Extend (or with 0, release) in-flight messages",
                TAG,
                {
                    "200": response(
                        "The ids whose delivery was changed; receipts refused as stale.",
                        json=_obj(
                            ["changed"], changed=ids_json, refused=_array(ref("RefusedReceipt"), n)
                        ),
                        msgpack=_obj(
                            ["changed"],
                            changed=ids_msgpack,
                            refused=_array(ref("RefusedReceipt"), n),
                        ),
                    ),
                    **errors(404, 413, 415, 422, 503),
                },
                body=_negotiated_body(ref("VisibilityRequest"), ref("VisibilityRequest")),
                description=_NEGOTIATED,
            ),
        },
        "/v2/topics/{topic}/messages": {
            "parameters": [TOPIC],
            "post": operation(
                "v2Publish",
                "Publish a batch of messages to every subscribed queue",
                TAG,
                {
                    "200": response(
                        "Per subscribed queue, one id per message.",
                        json=_obj(
                            ["ids"], ids={"type": "object", "additionalProperties": ids_json}
                        ),
                        msgpack=_obj(
                            ["ids"], ids={"type": "object", "additionalProperties": ids_msgpack}
                        ),
                    ),
                    **enqueue_errors,
                },
                body=_negotiated_body(ref("EnqueueRequest"), ref("EnqueueRequestMsgpack")),
                description=_NEGOTIATED,
            ),
        },
    }


def _bulk_paths() -> Obj:
    id_int = ref("MessageIdInt")
    buffer = {"type": "string", "description": "base64 in JSON; raw bytes in msgpack."}
    page = _obj(
        [
            "count",
            "ids",
            "enqueued_ms",
            "body_offsets",
            "bodies",
            "attributes",
            "next_from_id",
        ],
        count={"type": "integer", "minimum": 0, "maximum": MAX_PAGE},
        ids=buffer,
        enqueued_ms=buffer,
        body_offsets=buffer,
        bodies=buffer,
        attributes={
            "oneOf": [
                {"type": "null"},
                _array({"oneOf": [{"type": "null"}, {"type": "object"}]}),
            ]
        },
        # Decimal string in JSON, integer in msgpack, null at the end of the range.
        next_from_id={"oneOf": [{"type": "null"}, id_int, ref("MessageId")]},
    )
    stored = _obj(
        ["count", "ids", "value_offsets", "values", "next_from_id"],
        count={"type": "integer", "minimum": 0, "maximum": MAX_PAGE},
        ids=buffer,
        value_offsets=buffer,
        values=buffer,
        next_from_id={"oneOf": [{"type": "null"}, id_int, ref("MessageId")]},
    )
    bound = {"type": "integer", "minimum": 0, "maximum": MAX_ID}
    return {
        "/v2/status/ring": {
            "get": operation(
                "v2Ring",
                "The live ring and each member's slice (ids as JSON integers)",
                "bulk",
                {
                    "200": response(
                        "Members, sorted by name (a node of several workers: one member, "
                        "the node, at its address, with the whole id space).",
                        json=_obj(
                            ["members"],
                            members=_array(
                                _obj(
                                    ["name", "http", "from_id", "to_id"],
                                    name={"type": "string"},
                                    http={"type": "string"},
                                    from_id=ref("MessageId"),
                                    to_id=ref("MessageId"),
                                )
                            ),
                        ),
                    )
                },
            )
        },
        "/v2/queues/{queue}/partitions": {
            "parameters": [QUEUE],
            "get": operation(
                "v2Partitions",
                "The partitions this node serves the queue from (a node of several "
                "workers: every worker's)",
                "bulk",
                {
                    "200": response(
                        "This node and its partitions' id ranges (inclusive).",
                        json=_obj(
                            ["node", "http", "partitions"],
                            node={"type": "string"},
                            http={"type": "string"},
                            partitions=_array(
                                _obj(
                                    ["index", "from_id", "to_id"],
                                    index={"type": "integer", "minimum": 0},
                                    from_id=ref("MessageId"),
                                    to_id=ref("MessageId"),
                                )
                            ),
                        ),
                    ),
                    **errors(404, 503),
                },
            ),
        },
        "/v2/queues/{queue}/snapshot": {
            "parameters": [QUEUE],
            "get": operation(
                "v2Snapshot",
                "One columnar page of stored messages (no lock, no delete)",
                "bulk",
                {
                    "200": response(
                        "Little-endian int64 ids and times, int32 body offsets, the bodies"
                        " (encoding=columns); or little-endian int64 ids, int32 offsets and"
                        " the stored msgpack values (encoding=stored).",
                        json={"oneOf": [page, stored]},
                        msgpack={"oneOf": [page, stored]},
                    ),
                    **errors(404, 422, 503),
                },
                parameters=[
                    query_param("from_id", bound, "First id of the range (default 0)."),
                    query_param("to_id", bound, "Last id of the range, inclusive (default max)."),
                    query_param(
                        "limit",
                        {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 5000},
                        "Most messages in the page.",
                    ),
                    query_param(
                        "encoding",
                        {"type": "string", "enum": ["columns", "stored"], "default": "columns"},
                        "columns: decoded by the node; stored: each message's stored value"
                        " ([flags, body, enqueued_ms, attributes, ...], flags bit 0: zlib"
                        " body), decoded by the reader.",
                    ),
                ],
                description="from_id greater than to_id is a 422.",
            ),
        },
    }


def paths(limits: SpecLimits) -> Obj:
    return {**_v2_paths(limits), **_bulk_paths()}
