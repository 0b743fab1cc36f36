"""The OpenAPI paths of batch-completion tracking (:mod:`dynaq.api.batches`, Carlyle's routes)."""

from __future__ import annotations

from dynaq.api.batches import ESTIMATED_BASE, EXACT_BASE, MAX_ACKS_PER_REQUEST
from dynaq.api.openapi_common import (
    ITEM_ID,
    Obj,
    SpecLimits,
    body,
    errors,
    link,
    operation,
    path_param,
    query_param,
    response,
)
from dynaq.core.batch_items import MAX_BATCH_ID

TAG = "batches"

_BATCH_ID_PATH = path_param(
    "batch_id",
    {"type": "integer", "minimum": 0, "maximum": MAX_BATCH_ID},
    "A batch id.",
)
_BATCH_ID_IN: Obj = {
    "description": "A batch id: a JSON integer or a decimal string.",
    "oneOf": [
        {"type": "integer", "minimum": 0, "maximum": MAX_BATCH_ID},
        {"type": "string", "pattern": "^[0-9]{1,19}$"},
    ],
}
_BATCH_ID_OUT: Obj = {
    "type": "integer",
    "minimum": 0,
    "maximum": 2**53,
    "description": "Drawn below 2^53 so that JavaScript reads it exactly.",
}
_SINCE = query_param(
    "since",
    {
        "anyOf": [
            {"type": "string", "pattern": "^[0-9]{1,15}$"},
            {"type": "string", "format": "date-time"},
        ],
        "description": "Epoch milliseconds, or an ISO-8601 time (UTC if naive).",
    },
    "Batches last active before this go.",
    required=True,
)
_BODY_ERRORS = (404, 413, 415, 422, 503)


def _obj(required: list[str], **props: Obj) -> Obj:
    return {
        "type": "object",
        "required": required,
        "properties": props,
        "additionalProperties": False,
    }


def _request(schema: Obj, *, required: bool = True) -> Obj:
    """A request body: JSON or msgpack (the routes read both; they answer JSON)."""
    return body(required, json=schema, msgpack=schema)


def _header() -> Obj:
    ms = {"type": "integer", "minimum": 0}
    return _obj(
        ["batchId", "userKey", "mode", "isClosed", "isComplete", "items", "pending"],
        batchId=_BATCH_ID_OUT,
        userKey={"type": ["string", "null"]},
        mode={"enum": ["exact", "estimated"]},
        isClosed={"type": "boolean"},
        isComplete={"type": "boolean"},
        items={"type": "integer", "minimum": 0},
        pending={"type": "integer"},
        createdAt=ms,
        updatedAt=ms,
        completedAt={"oneOf": [{"type": "null"}, ms]},
        failedItems={
            "type": "array",
            "description": "Exact batches: items whose messages were dead-lettered (up to 1000); "
            "they count as settled, so the batch completes once every item is acked or failed.",
            "items": _obj(
                ["item", "queue", "messageId", "reason"],
                item={"type": "string"},
                queue={"type": "string"},
                messageId={"type": "string"},
                reason={"enum": ["dead_lettered", "expired"]},
            ),
        },
    )


def _completions() -> Obj:
    return _obj(
        ["batchCompletions"],
        batchCompletions={
            "type": "array",
            "items": _obj(
                ["batchId", "userKey", "completedAt"],
                batchId=_BATCH_ID_OUT,
                userKey={"type": ["string", "null"]},
                completedAt={"type": "integer", "minimum": 0},
            ),
        },
    )


def _removed() -> Obj:
    count = {"type": "integer", "minimum": 0}
    return _obj(["batchesRemoved", "itemsRemoved"], batchesRemoved=count, itemsRemoved=count)


def _shared(base: str, mode: str, prefix: str) -> Obj:
    """Open, describe, delete and age-out: the same in both modes."""
    by_id = {"batch_id": "$response.body#/batchId"}
    links = {
        "Describe": link(f"{prefix}Describe", "Read it", parameters=by_id),
        "Delete": link(f"{prefix}Delete", "Delete it", parameters=by_id),
        "Close": link(f"{prefix}Close", "Close it", parameters=by_id),
    }
    if mode == "exact":
        links["AddItems"] = link(
            "exactAddItems",
            "Add items",
            request_body={"batchId": "$response.body#/batchId", "items": 3},
        )
    else:
        links["Incr"] = link("estimatedIncr", "Count items", parameters=by_id)
        links["Decr"] = link(
            "estimatedDecr",
            "Ack one",
            request_body={"acks": [{"batchId": "$response.body#/batchId", "by": 1}]},
        )
    user_key = {"type": ["string", "null"], "maxLength": 1024}
    open_body = _request({"type": "object", "properties": {"userKey": user_key}}, required=False)
    opened = response("Its id.", json=_obj(["batchId"], batchId=_BATCH_ID_OUT), links=links)

    def open_op(suffix: str) -> Obj:
        return operation(
            f"{prefix}Open{suffix}",
            f"Open an {mode} batch",
            TAG,
            {"200": opened, **errors(413, 415, 422, 503)},
            body=open_body,
            description="The body is optional; userKey is a string of at most 1024 characters.",
        )

    def remove_op(kind: str) -> Obj:
        return operation(
            f"{prefix}Remove{kind.title()}",
            f"Remove {kind} batches last active before `since`",
            TAG,
            {"200": response("What went.", json=_removed()), **errors(422, 503)},
            parameters=[_SINCE],
        )

    return {
        base: {"post": open_op("")},
        base + "/": {"post": open_op("Slash")},
        base + "/{batch_id}": {
            "parameters": [_BATCH_ID_PATH],
            "get": operation(
                f"{prefix}Describe",
                f"An {mode} batch's state",
                TAG,
                {"200": response("The batch.", json=_header()), **errors(404, 422, 503)},
            ),
            "delete": operation(
                f"{prefix}Delete",
                f"Delete an {mode} batch and its items",
                TAG,
                {"200": response("What went.", json=_removed()), **errors(404, 422, 503)},
            ),
        },
        base + "/open": {"delete": remove_op("open")},
        base + "/closed": {"delete": remove_op("closed")},
    }


def _closed(prefix: str) -> Obj:
    return operation(
        f"{prefix}Close",
        "Close a batch; it completes once every item is acked",
        TAG,
        {
            "200": response(
                "Whether it is complete (now or already).",
                json=_obj(["isComplete"], isComplete={"type": "boolean"}),
            ),
            **errors(404, 422, 503),
        },
    )


def _exact(limits: SpecLimits) -> Obj:
    item_id = {"type": "string", "pattern": f"^{ITEM_ID}$"}
    return {
        f"{EXACT_BASE}/close/{{batch_id}}": {
            "parameters": [_BATCH_ID_PATH],
            "post": _closed("exact"),
        },
        f"{EXACT_BASE}/items": {
            "post": operation(
                "exactAddItems",
                "Add items in blocks {id, upto}: item ids are batchId:id:0 .. upto-1",
                TAG,
                {
                    "200": response(
                        "The new blocks.",
                        json=_obj(
                            ["batchItemGroupIds"],
                            batchItemGroupIds={
                                "type": "array",
                                "items": _obj(
                                    ["id", "upto"],
                                    id={"type": "string", "format": "uuid"},
                                    upto={"type": "integer", "minimum": 1},
                                ),
                            },
                        ),
                    ),
                    **errors(409, *_BODY_ERRORS),
                },
                body=_request(
                    {
                        "type": "object",
                        "required": ["batchId", "items"],
                        "properties": {
                            "batchId": _BATCH_ID_IN,
                            "items": {
                                "type": "integer",
                                "minimum": 1,
                                "maximum": limits.max_batch_items,
                            },
                        },
                    }
                ),
                description="Adding to a closed batch is a 409 `batch_closed`.",
            )
        },
        f"{EXACT_BASE}/items/ack": {
            "post": operation(
                "exactAck",
                "Ack items (idempotent)",
                TAG,
                {
                    "200": response("Batches this call completed.", json=_completions()),
                    **errors(*_BODY_ERRORS),
                },
                body=_request(
                    {
                        "type": "object",
                        "required": ["batchItemIds"],
                        "properties": {
                            "batchItemIds": {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": MAX_ACKS_PER_REQUEST,
                                "items": item_id,
                            }
                        },
                    }
                ),
                description="A malformed item id or an index beyond its block is a 422; an "
                "unknown batch or block a 404.",
            )
        },
    }


def _estimated(limits: SpecLimits) -> Obj:
    by = {"type": "integer", "minimum": 1, "maximum": limits.max_batch_items}
    return {
        f"{ESTIMATED_BASE}/{{batch_id}}/close": {
            "parameters": [_BATCH_ID_PATH],
            "post": _closed("estimated"),
        },
        f"{ESTIMATED_BASE}/{{batch_id}}/incr": {
            "parameters": [_BATCH_ID_PATH],
            "post": operation(
                "estimatedIncr",
                "Count `by` more expected items",
                TAG,
                {"200": response("The batch.", json=_header()), **errors(404, 409, 422, 503)},
                parameters=[query_param("by", {**by, "default": 1}, "How many (default 1).")],
            ),
        },
        f"{ESTIMATED_BASE}/decr": {
            "post": operation(
                "estimatedDecr",
                "Count acks (every `by` is applied)",
                TAG,
                {
                    "200": response("Batches this call completed.", json=_completions()),
                    **errors(*_BODY_ERRORS),
                },
                body=_request(
                    {
                        "type": "object",
                        "required": ["acks"],
                        "properties": {
                            "acks": {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": MAX_ACKS_PER_REQUEST,
                                "items": {
                                    "type": "object",
                                    "required": ["batchId"],
                                    "properties": {"batchId": _BATCH_ID_IN, "by": by},
                                },
                            }
                        },
                    }
                ),
            )
        },
    }


def paths(limits: SpecLimits) -> Obj:
    return {
        **_shared(EXACT_BASE, "exact", "exact"),
        **_shared(ESTIMATED_BASE, "estimated", "estimated"),
        **_exact(limits),
        **_estimated(limits),
    }
