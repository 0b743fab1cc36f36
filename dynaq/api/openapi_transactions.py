"""The OpenAPI path of ``POST /v2/transactions`` (:mod:`dynaq.api.transactions`)."""

from __future__ import annotations

from dynaq.api.openapi_common import JSON, Obj, SpecLimits, body, errors, operation, ref, response

TAG = "v2"
_RECEIPT = {"type": "string", "pattern": "^[A-Za-z0-9_-]{22}$"}


def _request(limits: SpecLimits, enqueue: str) -> Obj:
    n = limits.max_batch
    delete = {
        "type": "object",
        "required": ["queue", "receipt"],
        "properties": {"queue": ref("Name"), "receipt": _RECEIPT},
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "description": f"At least one item, at most {n} deletes and enqueues in all.",
        "properties": {
            "delete": {"type": "array", "maxItems": n, "items": delete},
            "enqueue": {"type": "array", "maxItems": n, "items": ref(enqueue)},
        },
        "additionalProperties": False,
    }


def _answer(id_schema: Obj, n: int) -> Obj:
    placed = {
        "type": "object",
        "required": ["queue", "id"],
        "properties": {
            "queue": {"type": "string"},
            "id": id_schema,
            "duplicate": {
                "const": True,
                "description": "Its dedup_id was already stored: this is the first id.",
            },
        },
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "required": ["enqueued", "deleted"],
        "properties": {
            "enqueued": {"type": "array", "maxItems": n, "items": placed},
            "deleted": {"type": "integer", "minimum": 0},
            "replayed": {
                "const": True,
                "description": "A retry of a transaction that had committed: nothing new "
                "was written (every output is a duplicate).",
            },
        },
        "additionalProperties": False,
    }


_STALE = {
    "description": "Nothing was applied. stale_receipt: some receipts are not current "
    "(received again since, visibility run out, unknown, or the message already deleted); "
    "receive again. receipts_in_use: another transaction holds them and may still commit "
    "(this one sent again while the first runs): retry, and its outcome decides.",
    "content": {
        JSON: {
            "schema": {
                "type": "object",
                "required": ["error", "code", "receipts"],
                "properties": {
                    "error": {"type": "string", "minLength": 1},
                    "code": {"enum": ["stale_receipt", "receipts_in_use"]},
                    "receipts": {"type": "array", "items": {"type": "string"}},
                },
                "additionalProperties": False,
            }
        }
    },
}


def responses() -> Obj:
    """The shared responses this path adds (its 409 carries the refused receipts)."""
    return {"StaleReceipts": _STALE}


def paths(limits: SpecLimits) -> Obj:
    n = limits.max_batch
    return {
        "/v2/transactions": {
            "post": operation(
                "v2Transact",
                "Delete received messages and enqueue outputs, all or nothing",
                TAG,
                {
                    "200": response(
                        "Committed: where each output went (in order), how many inputs were "
                        "deleted.",
                        json=_answer(ref("MessageId"), n),
                        msgpack=_answer(ref("MessageIdInt"), n),
                    ),
                    "409": {"$ref": "#/components/responses/StaleReceipts"},
                    **errors(404, 413, 415, 422, 503),
                },
                body=body(
                    json=_request(limits, "TxnEnqueue"),
                    msgpack=_request(limits, "TxnEnqueueMsgpack"),
                ),
                description=(
                    "Deletes the messages the receipts name and enqueues the outputs in one "
                    "atomic store write; if any receipt is not current, nothing is applied "
                    "(409 stale_receipt, listing them). Outputs with a dedup_id already stored "
                    "answer duplicate. Needs write on every queue named. JSON or msgpack as "
                    "the rest of v2."
                ),
            ),
        },
    }
