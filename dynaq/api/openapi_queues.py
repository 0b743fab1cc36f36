"""The OpenAPI description of the queue features beyond Dynamiq's: their settings
(redrive policy, timing, retention), subscriptions' options, the peer routes a
ring's nodes serve each other's queues through, and dead-letter sources (redrive
and purge tasks: :mod:`dynaq.api.openapi_tasks`)."""

from __future__ import annotations

from dynaq.api.openapi_common import QUEUE, Obj, body, errors, nullable, operation, ref
from dynaq.core.hints import RECEIPT_DELETE_PATH, RECEIPT_HOLD_PATH, STATS_PATH, VISIBILITY_PATH
from dynaq.core.peer_receive import RECEIVE_PATH, WATCH_PATH
from dynaq.services.queue_records import (
    MAX_DELAY_S,
    MAX_RECEIVE_COUNT,
    MAX_RETENTION_S,
    MIN_RETENTION_S,
)

TAG = "v2"


def _redrive_policy() -> Obj:
    return {
        "type": "object",
        "required": ["dead_letter_queue", "max_receive_count"],
        "properties": {
            "dead_letter_queue": ref("Name"),
            "max_receive_count": {"type": "integer", "minimum": 1, "maximum": MAX_RECEIVE_COUNT},
        },
        "additionalProperties": False,
        "description": (
            "A message received max_receive_count times moves to dead_letter_queue (another "
            "existing queue) in one store batch instead of being served again."
        ),
    }


def _timing() -> Obj:
    return {
        "delay_s": {
            "type": "number",
            "minimum": 0,
            "maximum": MAX_DELAY_S,
            "description": "New messages stay invisible this long (unless they say otherwise).",
        },
        "retention_s": {
            "type": "number",
            "minimum": MIN_RETENTION_S,
            "maximum": MAX_RETENTION_S,
            "description": "Messages older than this (since their enqueue) are removed.",
        },
    }


def _sqs_settings() -> Obj:
    """Settings SQS's attributes also set (so a definitions file restores them)."""
    return {
        "receive_wait_s": {
            "type": "number",
            "minimum": 0,
            "maximum": 20,
            "description": "A receive naming no wait long-polls this long (SQS's "
            "ReceiveMessageWaitTimeSeconds).",
        },
        "max_message_bytes": {
            "type": "integer",
            "minimum": 1024,
            "maximum": 1 << 20,
            "description": "Largest body taken (SQS's MaximumMessageSize).",
        },
        "fifo": {
            "type": "boolean",
            "description": "An SQS FIFO queue: set at creation (changing it later is a 422).",
        },
        "content_based_dedup": {
            "type": "boolean",
            "description": "FIFO: deduplicate by the body's SHA-256 when no dedup id is given.",
        },
        "tags": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 50},
    }


def settings_patch_extensions() -> Obj:
    """PATCH /v1/queues/{queue} keys added by these features."""
    return {"redrive_policy": nullable(_redrive_policy()), **_timing(), **_sqs_settings()}


def queue_description_extensions() -> Obj:
    """GET /v2/queues/{queue} members added by these features."""
    count = {"type": "integer", "minimum": 0}
    seconds = {"type": "number", "minimum": 0}
    return {
        "redrive_policy": nullable(_redrive_policy()),
        **_timing(),
        **_sqs_settings(),
        "visible": {**count, "description": "Stored and not in flight, summed over the ring."},
        "delayed": {**count, "description": "Waiting for their delay, summed over the ring."},
        "dead_lettered": {
            **count,
            "description": "Moved to the DLQ by the live nodes since each started.",
        },
        "oldest_age_s": {**seconds, "description": "Age of the oldest stored message."},
        "stats_nodes": {**count, "description": "How many nodes' figures were summed."},
        "stats_age_s": {**seconds, "description": "Age of the oldest figure summed."},
        "stats_capped": {
            "type": "boolean",
            "description": "A node counted only its first 100,000 messages: a floor.",
        },
    }


def subscription_body() -> Obj:
    """PUT /v1/topics/{topic}/queues/{queue}: the optional subscription options."""
    return body(
        required=False,
        json={
            "type": "object",
            "properties": {
                "filter_policy": nullable(
                    {
                        "type": "object",
                        "minProperties": 1,
                        "maxProperties": 10,
                        "additionalProperties": {
                            "oneOf": [
                                {"type": "array", "minItems": 1},
                                {"type": "object", "minProperties": 1},
                            ]
                        },
                        "description": "SNS's grammar on message attributes: exact values, "
                        '{"prefix"}, {"numeric": [op, n, ...]}, {"exists"}, {"anything-but"}; '
                        "with filter_scope body, nested objects of keys mirroring the JSON "
                        "body, whose leaves are arrays of those rules.",
                    }
                ),
                "filter_scope": {
                    "enum": ["attributes", "body"],
                    "default": "attributes",
                    "description": "What the policy reads: the message's attributes, or its "
                    "body as JSON (a body that is not a JSON object matches nothing).",
                },
                "raw_delivery": {"type": "boolean", "default": True},
            },
            "additionalProperties": False,
        },
    )


def paths() -> Obj:
    forwarded = {
        "type": "object",
        "required": ["queue", "ids", "visibility_timeout_s"],
        "properties": {
            "queue": ref("Name"),
            "ids": {"type": "array", "items": {"type": "integer", "minimum": 0}},
            "visibility_timeout_s": {"type": "number", "minimum": 0},
            "deliveries": {"type": "array", "items": {"type": "integer", "minimum": 1}},
        },
    }
    by_receipt: Obj = {
        "type": "object",
        "required": ["queue", "ids", "deliveries"],
        "properties": {
            "queue": ref("Name"),
            "ids": {"type": "array", "items": {"type": "integer", "minimum": 0}},
            "deliveries": {"type": "array", "items": {"type": "integer", "minimum": 1}},
        },
    }
    int_list = {"type": "array", "items": {"type": "integer"}}
    msgpack_answer = {"application/msgpack": {"schema": {"type": "object"}}}
    return {
        RECEIVE_PATH: {
            "post": operation(
                "internalReceive",
                "A receive from this node's slice for a peer's long poll (node to node only)",
                "internal",
                {
                    "200": {
                        "description": "messages: [id, body, enqueued_ms, attributes, "
                        "receive_count, group, delivery, origin] each, in flight here.",
                        "content": msgpack_answer,
                    },
                    **errors(404, 413, 422, 503),
                },
                body=body(
                    msgpack={
                        "type": "object",
                        "required": ["queue", "max_messages", "visibility_timeout_s"],
                        "properties": {
                            "queue": ref("Name"),
                            "max_messages": {"type": "integer", "minimum": 1},
                            "visibility_timeout_s": {"type": "number", "minimum": 0},
                        },
                    }
                ),
                description="Serves without waiting; signed like every /internal/ route.",
            )
        },
        WATCH_PATH: {
            "post": operation(
                "internalWatch",
                "Wait until this node may have something visible in a queue; serves "
                "nothing (node to node only)",
                "internal",
                {
                    "200": {"description": "ready: whether it may.", "content": msgpack_answer},
                    **errors(404, 413, 422),
                },
                body=body(
                    msgpack={
                        "type": "object",
                        "required": ["queue", "wait_s"],
                        "properties": {
                            "queue": ref("Name"),
                            "wait_s": {"type": "number", "minimum": 0, "maximum": 20},
                        },
                    }
                ),
                description="Signed like every /internal/ route.",
            )
        },
        RECEIPT_DELETE_PATH: {
            "post": operation(
                "internalReceiptDelete",
                "A receipt-checked delete forwarded to the node that served the messages "
                "(node to node only)",
                "internal",
                {
                    "200": {
                        "description": "The ids deleted, and those whose receipt was stale.",
                        "content": {
                            "application/msgpack": {
                                "schema": {
                                    "type": "object",
                                    "required": ["deleted", "stale"],
                                    "properties": {"deleted": int_list, "stale": int_list},
                                }
                            }
                        },
                    },
                    **errors(404, 413, 422),
                },
                body=body(msgpack=by_receipt),
                description="Checked and applied here, never forwarded again; signed like "
                "every /internal/ route.",
            )
        },
        RECEIPT_HOLD_PATH: {
            "post": operation(
                "internalReceiptHold",
                "A transaction's receipts, checked and held by the node that served the "
                "messages (node to node only)",
                "internal",
                {
                    "200": {
                        "description": "The ids whose receipt is not current; when none, "
                        "every message is held invisible for the transaction.",
                        "content": {
                            "application/msgpack": {
                                "schema": {
                                    "type": "object",
                                    "required": ["stale"],
                                    "properties": {"stale": int_list},
                                }
                            }
                        },
                    },
                    **errors(404, 413, 422),
                },
                body=body(
                    msgpack={
                        **by_receipt,
                        "properties": {
                            **by_receipt["properties"],
                            "release": {
                                "type": "boolean",
                                "description": "Release the claims instead (a transaction "
                                "that did not commit).",
                            },
                        },
                    }
                ),
                description="Checked here, never forwarded again; signed like every "
                "/internal/ route.",
            )
        },
        STATS_PATH: {
            "post": operation(
                "internalStats",
                "This node's figures for its slice of a queue (node to node only)",
                "internal",
                {
                    "200": {
                        "description": "stored, in_flight, delayed, dead_lettered, oldest_ms, "
                        "computed_ms, capped.",
                        "content": {"application/msgpack": {"schema": {"type": "object"}}},
                    },
                    **errors(404, 413, 422),
                },
                body=body(
                    msgpack={
                        "type": "object",
                        "required": ["queue"],
                        "properties": {"queue": ref("Name")},
                    }
                ),
            )
        },
        VISIBILITY_PATH: {
            "post": operation(
                "internalVisibility",
                "A visibility change forwarded to the owner of the messages' slice "
                "(node to node only)",
                "internal",
                {
                    "200": {
                        "description": "The ids that were in flight here.",
                        "content": {
                            "application/msgpack": {
                                "schema": {
                                    "type": "object",
                                    "required": ["changed"],
                                    "properties": {"changed": int_list, "stale": int_list},
                                }
                            }
                        },
                    },
                    **errors(404, 413, 422),
                },
                body=body(msgpack=forwarded),
                description="Applied here, never forwarded again; signed like every "
                "/internal/ route.",
            )
        },
        "/v2/queues/{queue}/dead_letter_sources": {
            "parameters": [QUEUE],
            "get": operation(
                "v2DeadLetterSources",
                "Queues that use this queue as their dead-letter queue",
                TAG,
                {
                    "200": {
                        "description": "Their names, sorted (as of this node's last config sync).",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["queues"],
                                    "properties": {
                                        "queues": {"type": "array", "items": ref("Name")}
                                    },
                                    "additionalProperties": False,
                                }
                            }
                        },
                    },
                    **errors(404, 503),
                },
            ),
        },
    }
