"""The OpenAPI paths of the v1 message routes (:mod:`dynaq.api.v1`): publish, enqueue,
receive, peek and delete.

These are the routes that carry messages: a request body is the raw message,
whatever its Content-Type, optionally tagged with a batch item. The v1 routes
that manage queues and topics are in :mod:`dynaq.api.openapi_v1`, which
assembles both. Every range here is the one the serving node enforces
(``limits``).
"""

from __future__ import annotations

from dynaq.api.openapi_common import (
    ITEM_ID,
    QUEUE,
    TOPIC,
    Obj,
    SpecLimits,
    body,
    errors,
    link,
    operation,
    path_param,
    query_param,
    ref,
    response,
)

TAG = "v1"

_QUEUE_LINK = {"queue": "$request.path.queue"}

_BATCH_ITEM = query_param(
    "batch_item_id",
    {"type": "string", "pattern": f"^$|^{ITEM_ID}$"},
    "Tags the message with a batch item `batchId:blockId:index` (acked when the message "
    "is deleted); a malformed id is a 422, an empty one tags nothing.",
)
_BATCH_ITEM_HEADER = {
    **_BATCH_ITEM,
    "in": "header",
    "name": "X-Dynaq-Batch-Item",
    "schema": {"type": "string", "pattern": f"^{ITEM_ID}$"},
    "description": "The same as `batch_item_id` (which wins when both are given), but an "
    "empty one is a 422.",
}
_RAW_BODY = body(
    required=False,
    octet={"type": "string", "format": "binary"},
    text={"type": "string"},
)
_RAW_DESCRIPTION = (
    "The raw request body is the message, whatever its Content-Type; over the message "
    "size limit it is a 413."
)


def _ids_param(description: str) -> Obj:
    return path_param(
        "ids",
        {"type": "string", "pattern": "^[0-9]{1,19}([ ,+]+[0-9]{1,19})*$"},
        description,
    )


def publish_paths() -> Obj:
    """``PUT /v1/topics/{topic}/message``: one raw message to every subscribed queue."""
    return {
        "/v1/topics/{topic}/message": {
            "parameters": [TOPIC],
            "put": operation(
                "v1Publish",
                "Publish one message to every subscribed queue",
                TAG,
                {
                    "200": response(
                        "One new id per subscribed queue.",
                        json={"type": "object", "additionalProperties": ref("MessageId")},
                    ),
                    **errors(404, 413, 422, 503),
                },
                parameters=[_BATCH_ITEM, _BATCH_ITEM_HEADER],
                body=_RAW_BODY,
                description=_RAW_DESCRIPTION,
            ),
        },
    }


def queue_message_paths(limits: SpecLimits) -> Obj:
    """Enqueue, receive, peek and delete on ``/v1/queues/{queue}/message(s)/...``."""
    return {
        "/v1/queues/{queue}/message": {
            "parameters": [QUEUE],
            "put": operation(
                "v1Enqueue",
                "Enqueue one message",
                TAG,
                {
                    "200": response(
                        "The new message's id.",
                        text={"type": "string", "pattern": "^[0-9]{1,19}$"},
                        links={
                            "Delete": link(
                                "v1DeleteMessage",
                                "Delete it",
                                parameters={**_QUEUE_LINK, "ids": "$response.body"},
                            ),
                            "Peek": link(
                                "v1Peek",
                                "Peek at it",
                                parameters={**_QUEUE_LINK, "ids": "$response.body"},
                            ),
                        },
                    ),
                    **errors(404, 413, 422, 503),
                },
                parameters=[_BATCH_ITEM, _BATCH_ITEM_HEADER],
                body=_RAW_BODY,
                description=_RAW_DESCRIPTION,
            ),
        },
        "/v1/queues/{queue}/messages/{batch_size_or_ids}": {
            "get": operation(
                "v1Receive",
                "Receive up to batch_size messages",
                TAG,
                {
                    "200": response(
                        "The messages; [] when nothing is visible.",
                        json={
                            "type": "array",
                            "maxItems": limits.max_batch,
                            "items": ref("V1Message"),
                        },
                    ),
                    **errors(404, 422, 503),
                },
                parameters=[
                    QUEUE,
                    path_param(
                        "batch_size_or_ids",
                        {"type": "integer", "minimum": 1, "maximum": limits.max_batch},
                        "The batch size, in ASCII digits.",
                    ),
                ],
            ),
            "delete": operation(
                "v1DeleteMessages",
                "Delete messages",
                TAG,
                {
                    "200": response(
                        "How many existed.",
                        json={
                            "type": "object",
                            "required": ["deleted"],
                            "properties": {"deleted": {"type": "integer", "minimum": 0}},
                            "additionalProperties": False,
                        },
                    ),
                    **errors(404, 422, 503),
                },
                parameters=[
                    QUEUE,
                    path_param(
                        "batch_size_or_ids",
                        {"type": "string", "pattern": "^[0-9]{1,19}([ ,+]+[0-9]{1,19})*$"},
                        "Message ids separated by commas (or spaces or +).",
                    ),
                ],
            ),
        },
        "/v1/queues/{queue}/message/{ids}": {
            "get": operation(
                "v1Peek",
                "Read messages by id without locking them",
                TAG,
                {
                    "200": response(
                        "The messages that exist.",
                        json={
                            "type": "object",
                            "required": ["messages"],
                            "properties": {
                                "messages": {"type": "array", "items": ref("V1Message")}
                            },
                            "additionalProperties": False,
                        },
                    ),
                    **errors(404, 422, 503),
                },
                parameters=[QUEUE, _ids_param("Message ids separated by spaces (or , or +).")],
            ),
            "delete": operation(
                "v1DeleteMessage",
                "Delete one message",
                TAG,
                {
                    "200": response("Whether it existed.", json={"type": "boolean"}),
                    **errors(404, 422, 503),
                },
                parameters=[
                    QUEUE,
                    path_param("ids", {"type": "string", "pattern": "^[0-9]{1,19}$"}, "One id."),
                ],
            ),
        },
    }
