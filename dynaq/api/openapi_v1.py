"""The OpenAPI paths of the v1 (Dynamiq-compatible) routes, :mod:`dynaq.api.v1`.

This module describes the routes that report the ring and manage queues and
topics; the message routes (publish, enqueue, receive, peek, delete) are
described in :mod:`dynaq.api.openapi_v1_messages`. :func:`paths` assembles
both, in one fixed order (status, topics, publish, queues, queue messages), so
every node's document lists them alike.
"""

from __future__ import annotations

from dynaq.api.openapi_common import (
    MAX_VISIBILITY_S,
    QUEUE,
    TOPIC,
    Obj,
    SpecLimits,
    body,
    errors,
    link,
    operation,
    path_param,
    ref,
    response,
)
from dynaq.api.openapi_queues import settings_patch_extensions, subscription_body
from dynaq.api.openapi_v1_messages import publish_paths, queue_message_paths

TAG = "v1"

_QUEUE_LINK = {"queue": "$request.path.queue"}
_TOPIC_LINK = {"topic": "$request.path.topic"}


def _settings_patch() -> Obj:
    number = {"type": "number", "minimum": 0}
    partitions = {"type": "integer", "minimum": 1, "maximum": 1024}
    return {
        "type": "object",
        "properties": {
            "visibility_timeout": {**number, "maximum": MAX_VISIBILITY_S},
            "min_partitions": partitions,
            "max_partitions": partitions,
            "max_partition_age": {**number, "maximum": 10 * 365 * 86_400},
            "compressed_messages": {"type": "boolean"},
            **settings_patch_extensions(),
        },
        "additionalProperties": False,
        "description": "Every key is optional; min_partitions must not exceed max_partitions.",
    }


def _queue_settings() -> Obj:
    return {
        "type": "object",
        "required": [
            "VisibilityTimeout",
            "MinPartitions",
            "MaxPartitions",
            "MaxPartitionAge",
            "CompressedMessages",
            "partitions",
        ],
        "properties": {
            "VisibilityTimeout": {"type": "number", "minimum": 0},
            "MinPartitions": {"type": "integer", "minimum": 1},
            "MaxPartitions": {"type": "integer", "minimum": 1},
            "MaxPartitionAge": {"type": "number", "minimum": 0},
            "CompressedMessages": {"type": "boolean"},
            "partitions": {"type": "integer", "minimum": 0},
        },
        "additionalProperties": False,
    }


def _names(member: str) -> Obj:
    return {
        "type": "object",
        "required": [member],
        "properties": {member: {"type": "array", "items": ref("Name")}},
        "additionalProperties": False,
    }


def _status_paths() -> Obj:
    return {
        "/v1/status/servers": {
            "get": operation(
                "v1Servers",
                "The live members",
                TAG,
                {
                    "200": response(
                        "`Member: <name> <host:port>` per line.", text={"type": "string"}
                    )
                },
            )
        },
        "/v1/status/partitionrange": {
            "get": operation(
                "v1PartitionRange",
                "This node's slice of the id space (inclusive)",
                TAG,
                {
                    "200": response(
                        "The slice's bounds.",
                        json={
                            "type": "object",
                            "required": ["bottom", "top"],
                            "properties": {"bottom": ref("MessageId"), "top": ref("MessageId")},
                            "additionalProperties": False,
                        },
                    )
                },
            )
        },
    }


def _topic_paths() -> Obj:
    subscriber = path_param("queue", ref("Name"), "The subscribing queue's name.")
    # Unsubscribing is idempotent and checks no name: any segment answers 200.
    unsubscribed = path_param("queue", {"type": "string"}, "A subscribed queue's name.")
    return {
        "/v1/topics": {
            "get": operation(
                "v1ListTopics",
                "List topics",
                TAG,
                {"200": response("Topic names.", json=_names("topics"))},
            )
        },
        "/v1/topics/{topic}": {
            "parameters": [TOPIC],
            "put": operation(
                "v1CreateTopic",
                "Create a topic",
                TAG,
                {
                    "201": response(
                        "Created, with no subscribers.",
                        json=ref("Queues"),
                        links={
                            "Subscribe": link(
                                "v1Subscribe", "Subscribe a queue", parameters=_TOPIC_LINK
                            ),
                            "Publish": link("v2Publish", "Publish", parameters=_TOPIC_LINK),
                            "PublishRaw": link("v1Publish", "Publish", parameters=_TOPIC_LINK),
                            "Get": link("v1GetTopic", "Read it", parameters=_TOPIC_LINK),
                            "Delete": link("v1DeleteTopic", "Delete it", parameters=_TOPIC_LINK),
                        },
                    ),
                    **errors(422, 503),
                },
                description="422 `already_exists` when it exists, `invalid_name` for a bad name.",
            ),
            "get": operation(
                "v1GetTopic",
                "A topic's subscribers",
                TAG,
                {"200": response("Subscribed queues.", json=ref("Queues")), **errors(404, 503)},
            ),
            "delete": operation(
                "v1DeleteTopic",
                "Delete a topic",
                TAG,
                {"200": response("Deleted.", json=ref("Deleted")), **errors(404, 503)},
            ),
        },
        "/v1/topics/{topic}/queues/{queue}": {
            "put": operation(
                "v1Subscribe",
                "Subscribe a queue (idempotent)",
                TAG,
                {
                    "200": response("The subscribers.", json=ref("Queues")),
                    **errors(404, 409, 422, 503),
                },
                parameters=[TOPIC, subscriber],
                body=subscription_body(),
                description="A missing topic or queue is a 422 (Dynamiq's contract). "
                "The optional body sets a filter policy and raw or enveloped delivery.",
            ),
            "delete": operation(
                "v1Unsubscribe",
                "Unsubscribe a queue (idempotent)",
                TAG,
                {"200": response("The subscribers.", json=ref("Queues")), **errors(404, 409, 503)},
                parameters=[TOPIC, unsubscribed],
            ),
        },
    }


def _queue_paths() -> Obj:
    return {
        "/v1/queues": {
            "get": operation(
                "v1ListQueues",
                "List queues",
                TAG,
                {"200": response("Queue names.", json=_names("queues"))},
            )
        },
        "/v1/queues/{queue}": {
            "parameters": [QUEUE],
            "put": operation(
                "v1CreateQueue",
                "Create a queue (default settings unless the body names some)",
                TAG,
                {
                    "201": response(
                        "Created.",
                        json={"const": "created"},
                        links={
                            "Enqueue": link("v2Enqueue", "Enqueue", parameters=_QUEUE_LINK),
                            "EnqueueRaw": link("v1Enqueue", "Enqueue", parameters=_QUEUE_LINK),
                            "Receive": link("v2Receive", "Receive", parameters=_QUEUE_LINK),
                            "ReceiveV1": link("v1Receive", "Receive", parameters=_QUEUE_LINK),
                            "Describe": link("v2DescribeQueue", "Read", parameters=_QUEUE_LINK),
                            "Configure": link("v1ConfigureQueue", "Set", parameters=_QUEUE_LINK),
                            "Snapshot": link("v2Snapshot", "Page", parameters=_QUEUE_LINK),
                            "Delete": link("v1DeleteQueue", "Delete", parameters=_QUEUE_LINK),
                        },
                    ),
                    **errors(409, 413, 422, 503),
                },
                body=body(required=False, json=_settings_patch()),
                description="An optional body holds settings, as PATCH takes them, applied in "
                "the same write (the queue never exists without them). 422 `already_exists`, "
                "`invalid_name` or bad settings; 409 while a queue of that name was deleted "
                "moments ago.",
            ),
            "get": operation(
                "v1GetQueue",
                "A queue's settings",
                TAG,
                {"200": response("Settings.", json=_queue_settings()), **errors(404, 503)},
            ),
            "patch": operation(
                "v1ConfigureQueue",
                "Change a queue's settings",
                TAG,
                {
                    "200": response("Applied.", json={"const": "ok"}),
                    **errors(404, 409, 413, 422, 503),
                },
                body=body(json=_settings_patch()),
                description="The body is parsed as JSON whatever its Content-Type.",
            ),
            "delete": operation(
                "v1DeleteQueue",
                "Delete a queue and purge its messages",
                TAG,
                {"200": response("Deleted.", json=ref("Deleted")), **errors(404, 409, 503)},
            ),
        },
    }


def paths(limits: SpecLimits) -> Obj:
    return {
        **_status_paths(),
        **_topic_paths(),
        **publish_paths(),
        **_queue_paths(),
        **queue_message_paths(limits),
    }
