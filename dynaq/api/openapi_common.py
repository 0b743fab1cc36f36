"""Building blocks of the OpenAPI description: media types, helpers, shared components.

The route modules (:mod:`~dynaq.api.openapi_v1`, :mod:`~dynaq.api.openapi_v2`,
:mod:`~dynaq.api.openapi_batches`) describe paths with these helpers;
:mod:`dynaq.api.openapi` assembles them. Everything is plain dicts, built in
code, so ranges come from the same constants the parsers enforce.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dynaq.core.ids import MAX_ID
from dynaq.services.queue_records import NAME_PATTERN
from dynaq.services.queues import MAX_TAG_BYTES, MAX_WAIT_S

Obj = dict[str, Any]

JSON = "application/json"
MSGPACK = "application/msgpack"
TEXT = "text/plain"

ITEM_ID = (
    "[0-9]{1,19}:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    ":[0-9]{1,10}"
)
"""A batch item id ``batchId:blockId:index`` as blocks are handed out (the parser
also takes the other spellings :class:`uuid.UUID` reads)."""

MAX_VISIBILITY_S = 43_200
"""Longest visibility timeout (12 h), as ``check_visibility`` and the PATCH grammar enforce."""


@dataclass(frozen=True)
class SpecLimits:
    """The node's configured input limits, so the served ranges are the enforced ones."""

    max_batch: int = 1000
    max_message_bytes: int = 256 * 1024
    max_request_bytes: int = 16 * 1024 * 1024
    max_batch_items: int = 1_000_000


def ref(name: str) -> Obj:
    """A reference to a component schema."""
    return {"$ref": f"#/components/schemas/{name}"}


def operation(
    op_id: str,
    summary: str,
    tag: str,
    responses: Obj,
    *,
    parameters: list[Obj] | None = None,
    body: Obj | None = None,
    description: str | None = None,
) -> Obj:
    """One operation object."""
    op: Obj = {"operationId": op_id, "summary": summary, "tags": [tag]}
    if description:
        op["description"] = description
    if parameters:
        op["parameters"] = parameters
    if body is not None:
        op["requestBody"] = body
    op["responses"] = responses
    return op


def path_param(name: str, schema: Obj, description: str) -> Obj:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": schema,
    }


def query_param(name: str, schema: Obj, description: str, *, required: bool = False) -> Obj:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": schema,
    }


QUEUE = path_param("queue", ref("Name"), "A queue's name.")
TOPIC = path_param("topic", ref("Name"), "A topic's name.")


def body(required: bool = True, **media: Obj) -> Obj:
    """A request body; ``media`` maps a media type (``_`` for ``/``, see below) to its schema."""
    return {
        "required": required,
        "content": {_media(k): {"schema": v} for k, v in media.items()},
    }


def _media(key: str) -> str:
    return {"json": JSON, "msgpack": MSGPACK, "text": TEXT, "octet": "application/octet-stream"}[
        key
    ]


def response(description: str, links: Obj | None = None, **media: Obj) -> Obj:
    """A success response with one schema per media type (``json``, ``msgpack``, ``text``)."""
    out: Obj = {
        "description": description,
        "content": {_media(k): {"schema": v} for k, v in media.items()},
    }
    if links:
        out["links"] = links
    return out


def link(op_id: str, description: str, *, parameters: Obj | None = None, **rest: Any) -> Obj:
    """An OpenAPI link (what the stateful tests follow)."""
    out: Obj = {"operationId": op_id, "description": description}
    if parameters:
        out["parameters"] = parameters
    if "request_body" in rest:
        out["requestBody"] = rest["request_body"]
    return out


# Errors ----------------------------------------------------------------------

_ERRORS: dict[int, tuple[str, str, tuple[str, ...]]] = {
    400: (
        "MalformedBody",
        "The body could not be read as sent: bad chunking, or a Content-Encoding "
        "(gzip, deflate) the bytes are not in.",
        ("malformed_body",),
    ),
    401: (
        "Unauthorized",
        "No valid bearer token (client routes, when tokens are configured), or an unsigned, "
        "forged or replayed node-to-node request.",
        ("unauthorized",),
    ),
    403: (
        "Forbidden",
        "The token lacks the permission the route needs on this queue, topic or batch; "
        "or an /internal/ path through HAProxy.",
        ("forbidden",),
    ),
    408: (
        "RequestTimeout",
        "The request body did not arrive within http.body_timeout_s.",
        ("request_timeout",),
    ),
    404: (
        "NotFound",
        "The named queue, topic, batch, stream or subscription does not exist, or the path "
        "matches no route.",
        (
            "not_found",
            "queue_not_found",
            "topic_not_found",
            "batch_not_found",
            "stream_not_found",
            "subscription_not_found",
        ),
    ),
    409: (
        "Conflict",
        "A concurrent update won (retry), a closed batch, a queue name deleted moments ago, "
        "a stream order key that decreases, an incompatible stream schema, or a fenced publisher.",
        ("conflict", "batch_closed", "order_key_decreased", "schema_conflict", "publisher_fenced"),
    ),
    413: (
        "PayloadTooLarge",
        "The request body or a message (with its attributes) is over the size limit.",
        ("payload_too_large",),
    ),
    415: (
        "UnsupportedMediaType",
        "The Content-Type is neither JSON nor msgpack.",
        ("unsupported_media_type",),
    ),
    422: (
        "InvalidInput",
        "Malformed or out-of-range input: names, ids, numbers, types, JSON or msgpack.",
        ("invalid_input", "invalid_name", "wrong_batch_mode", "already_exists"),
    ),
    503: (
        "Unavailable",
        "The store failed or this node is not serving (starting or draining): retry, "
        "elsewhere if need be.",
        (
            "storage_error",
            "storage_unavailable",
            "id_clock_stalled",
            "decr_incomplete",
            "node_not_serving",
            "cluster_full",
            "writer_slot_lost",
            "stream_unavailable",
            "stream_deleting",
        ),
    ),
}


def errors(*statuses: int) -> Obj:
    """References to the shared error responses for ``statuses``."""
    return {str(s): {"$ref": f"#/components/responses/{_ERRORS[s][0]}"} for s in statuses}


def _error_schema(codes: tuple[str, ...]) -> Obj:
    return {
        "allOf": [ref("Error")],
        "properties": {"code": {"enum": list(codes)}},
    }


def error_responses() -> Obj:
    return {
        name: {"description": text, "content": {JSON: {"schema": _error_schema(codes)}}}
        for name, text, codes in _ERRORS.values()
    }


# Schemas ---------------------------------------------------------------------

_ID_TEXT = "^[0-9]{1,19}$"


def _string_map(max_entries: int | None = None) -> Obj:
    out: Obj = {"type": "object", "additionalProperties": {"type": "string"}}
    if max_entries is not None:
        out["maxProperties"] = max_entries
    return out


def nullable(schema: Obj) -> Obj:
    """An optional member that may also be null: the parsers read null as absent."""
    return {"oneOf": [{"type": "null"}, schema]}


def _tag(what: str) -> Obj:
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_TAG_BYTES,
        "description": f"{what}: 1..{MAX_TAG_BYTES} bytes of UTF-8 (longer in bytes is a 422).",
    }


def _new_message(body_schema: Obj) -> Obj:
    return {
        "type": "object",
        "required": ["body"],
        "properties": {
            "body": body_schema,
            "encoding": nullable({"enum": ["utf-8", "base64"]}),
            "attributes": nullable(
                {
                    **_string_map(32),
                    "description": "Delivered with the message; `dynaq.batch_item` "
                    "tags a batch item.",
                }
            ),
            "group": nullable(_tag("Message group (delivered in order, one at a time)")),
            "dedup_id": nullable(_tag("Deduplication id")),
            "delay_s": nullable(
                {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 900,
                    "description": "Invisible until this long after the enqueue (default: "
                    "the queue's delay_s). Not with a group (set the queue's delay_s).",
                }
            ),
        },
        "not": {
            "required": ["group", "delay_s"],
            "properties": {"group": {"type": "string"}, "delay_s": {"type": "number"}},
        },
    }


def _origin(id_schema: Obj) -> Obj:
    """Where a dead-lettered message came from."""
    ms = {"type": "integer", "minimum": 0}
    return {
        "type": "object",
        "description": "Present on a message moved to a dead-letter queue: where it came from.",
        "required": ["queue", "id", "receive_count", "enqueued_at_ms", "dead_lettered_at_ms"],
        "properties": {
            "queue": {"type": "string"},
            "id": id_schema,
            "receive_count": {"type": "integer", "minimum": 0},
            "enqueued_at_ms": ms,
            "dead_lettered_at_ms": ms,
        },
        "additionalProperties": False,
    }


def _received(id_schema: Obj, body_schema: Obj, *, base64: bool) -> Obj:
    props: Obj = {
        "id": id_schema,
        "body": body_schema,
        "enqueued_at_ms": {"type": "integer", "minimum": 0},
        "receive_count": {"type": "integer", "minimum": 0},
        "receipt": {
            "type": "string",
            "pattern": "^[A-Za-z0-9_-]{22}$",
            "description": "Names this delivery: a delete or visibility change by receipt "
            "acts only while no later delivery of the message exists.",
        },
        "attributes": _string_map(),
        "group": {"type": "string"},
        "origin": _origin(id_schema),
    }
    if base64:
        props["encoding"] = {"const": "base64"}
    return {
        "type": "object",
        "required": ["id", "body", "enqueued_at_ms", "receive_count"],
        "properties": props,
        "additionalProperties": False,
    }


def schemas(limits: SpecLimits) -> Obj:
    """The component schemas (ranges from ``limits``)."""
    n = limits.max_batch
    bin_ = {
        "type": "string",
        "description": "msgpack bin (raw bytes); a str is accepted in requests.",
    }
    ids_in = {
        "type": "array",
        "minItems": 1,
        "maxItems": n,
        "items": ref("MessageIdIn"),
    }
    receipts_in = {
        "type": "array",
        "minItems": 1,
        "maxItems": n,
        "items": {"type": "string", "pattern": "^[A-Za-z0-9_-]{22}$"},
    }
    seconds = {"type": "number", "minimum": 0, "maximum": MAX_VISIBILITY_S}
    return {
        "Error": {
            "type": "object",
            "description": "Every 4xx and 5xx that dynaq answers itself.",
            "required": ["error", "code"],
            "properties": {
                "error": {"type": "string", "minLength": 1},
                "code": {"type": "string", "pattern": "^[a-z_]+$"},
            },
            "additionalProperties": False,
        },
        "Name": {
            "type": "string",
            "pattern": f"^{NAME_PATTERN.pattern}$",
            "description": "1-80 of A-Z a-z 0-9 _ - ., not starting with . or - (else 422).",
        },
        "MessageId": {
            "type": "string",
            "pattern": _ID_TEXT,
            "description": f"A message id in JSON: a decimal string in [0, {MAX_ID}].",
        },
        "MessageIdInt": {"type": "integer", "minimum": 0, "maximum": MAX_ID},
        "MessageIdIn": {
            "description": "A message id in a request: an integer or a decimal string.",
            "oneOf": [ref("MessageIdInt"), ref("MessageId")],
        },
        "NewMessage": _new_message(
            {"type": "string", "description": "UTF-8 text, or base64 with encoding=base64."}
        ),
        "NewMessageMsgpack": _new_message(bin_),
        "EnqueueRequest": {
            "type": "object",
            "required": ["messages"],
            "properties": {
                "messages": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": n,
                    "items": ref("NewMessage"),
                }
            },
        },
        "EnqueueRequestMsgpack": {
            "type": "object",
            "required": ["messages"],
            "properties": {
                "messages": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": n,
                    "items": ref("NewMessageMsgpack"),
                }
            },
        },
        "ReceiveRequest": {
            "type": "object",
            "properties": {
                "max_messages": {"type": "integer", "minimum": 1, "maximum": n, "default": 1},
                "visibility_timeout_s": nullable(seconds),
                "wait_time_s": nullable({"type": "number", "minimum": 0, "maximum": MAX_WAIT_S}),
            },
        },
        "DeleteRequest": {
            "type": "object",
            "anyOf": [{"required": ["ids"]}, {"required": ["receipts"]}],
            "properties": {"ids": ids_in, "receipts": receipts_in},
        },
        "VisibilityRequest": {
            "type": "object",
            "required": ["visibility_timeout_s"],
            "anyOf": [{"required": ["ids"]}, {"required": ["receipts"]}],
            "properties": {"ids": ids_in, "receipts": receipts_in, "visibility_timeout_s": seconds},
        },
        "RefusedReceipt": {
            "type": "object",
            "required": ["receipt", "id", "code", "error"],
            "properties": {
                "receipt": {"type": "string"},
                "id": {"oneOf": [ref("MessageId"), {"type": "integer", "minimum": 0}]},
                "code": {"const": "stale_receipt"},
                "error": {"type": "string"},
            },
        },
        "V1Message": {
            "type": "object",
            "required": ["id", "body"],
            "properties": {
                "id": ref("MessageId"),
                "body": {"type": "string"},
                "encoding": {"const": "base64"},
            },
            "additionalProperties": False,
        },
        "ReceivedMessage": _received(ref("MessageId"), {"type": "string"}, base64=True),
        "ReceivedMessageMsgpack": _received(ref("MessageIdInt"), bin_, base64=False),
        "Queues": {
            "type": "object",
            "required": ["Queues"],
            "properties": {
                "Queues": {"type": "array", "items": ref("Name")},
                "Subscriptions": {
                    "type": "object",
                    "description": "Options of the subscriptions that have any.",
                    "additionalProperties": {"type": "object"},
                },
            },
            "additionalProperties": False,
        },
        "Deleted": {
            "type": "object",
            "required": ["Deleted"],
            "properties": {"Deleted": {"const": True}},
            "additionalProperties": False,
        },
    }
