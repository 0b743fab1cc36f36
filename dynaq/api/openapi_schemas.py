"""The shared components of the OpenAPI description: messages, receipts, origins,
names and ids, with ranges taken from the limits the parsers enforce."""

from __future__ import annotations

from dynaq.api.openapi_common import (
    MAX_VISIBILITY_S,
    Obj,
    SpecLimits,
    nullable,
    ref,
)
from dynaq.core.ids import MAX_ID
from dynaq.services.queue_records import NAME_PATTERN
from dynaq.services.queues import MAX_TAG_BYTES, MAX_WAIT_S

_ID_TEXT = "^[0-9]{1,19}$"


def _string_map(max_entries: int | None = None) -> Obj:
    out: Obj = {"type": "object", "additionalProperties": {"type": "string"}}
    if max_entries is not None:
        out["maxProperties"] = max_entries
    return out


def _tag(what: str) -> Obj:
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_TAG_BYTES,
        "description": f"{what}: 1..{MAX_TAG_BYTES} bytes of UTF-8 (longer in bytes is a 422).",
    }


def _new_message(body_schema: Obj, queue: bool = False) -> Obj:
    """A message object; ``queue``: a transaction's enqueue item, which names its queue.
    Any other member is refused (422), as the parser refuses it."""
    where: Obj = {"queue": ref("Name")} if queue else {}
    return {
        "type": "object",
        "required": ["queue", "body"] if queue else ["body"],
        "properties": {
            **where,
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
        "additionalProperties": False,
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
    text = {"type": "string", "description": "UTF-8 text, or base64 with encoding=base64."}
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
        "NewMessage": _new_message(text),
        "NewMessageMsgpack": _new_message(bin_),
        "TxnEnqueue": _new_message(text, queue=True),
        "TxnEnqueueMsgpack": _new_message(bin_, queue=True),
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
            "additionalProperties": False,
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
            "additionalProperties": False,
        },
        "ReceiveRequest": {
            "type": "object",
            "properties": {
                "max_messages": {"type": "integer", "minimum": 1, "maximum": n, "default": 1},
                "visibility_timeout_s": nullable(seconds),
                "wait_time_s": nullable({"type": "number", "minimum": 0, "maximum": MAX_WAIT_S}),
                "max_per_group": {"type": "integer", "minimum": 1, "maximum": n, "default": 1},
            },
            "additionalProperties": False,
        },
        "DeleteRequest": {
            "type": "object",
            "anyOf": [{"required": ["ids"]}, {"required": ["receipts"]}],
            "properties": {"ids": ids_in, "receipts": receipts_in},
            "additionalProperties": False,
        },
        "VisibilityRequest": {
            "type": "object",
            "required": ["visibility_timeout_s"],
            "anyOf": [{"required": ["ids"]}, {"required": ["receipts"]}],
            "properties": {"ids": ids_in, "receipts": receipts_in, "visibility_timeout_s": seconds},
            "additionalProperties": False,
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
