"""Building blocks of the OpenAPI description: media types, helpers, error responses.

The route modules (:mod:`~dynaq.api.openapi_v1`, :mod:`~dynaq.api.openapi_v2`,
:mod:`~dynaq.api.openapi_batches`) describe paths with these helpers;
:mod:`dynaq.api.openapi` assembles them. Everything is plain dicts, built in
code, so ranges come from the same constants the parsers enforce.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
            "processor_not_found",
        ),
    ),
    409: (
        "Conflict",
        "A concurrent update won (retry), a closed batch, a queue name deleted moments ago, "
        "a stream order key that decreases, an incompatible stream schema, a fenced publisher, "
        "a conditional append (expect_index) whose index is taken, or a cancel of a task "
        "that is not a running redrive.",
        (
            "conflict",
            "batch_closed",
            "order_key_decreased",
            "schema_conflict",
            "publisher_fenced",
            "replica_out_of_step",
            "index_taken",
            "task_not_running",
        ),
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
            "replication_timeout",
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


def nullable(schema: Obj) -> Obj:
    """An optional member that may also be null: the parsers read null as absent."""
    return {"oneOf": [{"type": "null"}, schema]}
