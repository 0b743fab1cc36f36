"""Carlyle-compatible batch tracking routes under ``/api/v1/batch/{exact,estimated}``.

Batch ids are JSON numbers (as Carlyle's Longs; dynaq draws them below 2^53 so
JavaScript clients read them exactly); a decimal string is accepted too.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from dynaq.api.codec import SMALL_BODY_BYTES, json_response, read_body, read_raw
from dynaq.api.params import is_decimal
from dynaq.core.batch_items import parse_batch_id, parse_item_id
from dynaq.errors import InvalidInput
from dynaq.services.batches import (
    ESTIMATED,
    EXACT,
    BatchHeader,
    BatchService,
    Completion,
    DecrIncomplete,
)

BATCHES = web.AppKey("batches", BatchService)

routes = web.RouteTableDef()

EXACT_BASE = "/api/v1/batch/exact"
ESTIMATED_BASE = "/api/v1/batch/estimated"
_ID = r"{batch_id:[^/]+}"
"""Any path segment: a malformed batch id is a 422 naming it (parse_batch_id), not a 404."""
MAX_ACKS_PER_REQUEST = 10_000


def _service(request: web.Request) -> BatchService:
    return request.app[BATCHES]


async def _object(request: web.Request, *, optional: bool = False) -> Mapping[str, Any]:
    if optional and not await read_raw(request):
        return {}
    body = await read_body(request, SMALL_BODY_BYTES)
    if not isinstance(body, dict):
        raise InvalidInput("request body must be a JSON object")
    return body


def _batch_id(value: object, where: str = "batchId") -> int:
    if isinstance(value, bool):
        raise InvalidInput(f"{where} must be an integer")
    if isinstance(value, int):
        if value < 0:
            raise InvalidInput(f"{where} must not be negative")
        return parse_batch_id(str(value))
    if isinstance(value, str):
        return parse_batch_id(value)
    raise InvalidInput(f"{where} must be an integer")


def _bounded_list(body: Mapping[str, Any], name: str, of: str) -> list[Any]:
    value = body.get(name)
    if not isinstance(value, list) or not value:
        raise InvalidInput(f"{name} must be a non-empty array of {of}")
    if len(value) > MAX_ACKS_PER_REQUEST:
        raise InvalidInput(f"at most {MAX_ACKS_PER_REQUEST} {of} per request, got {len(value)}")
    return value


def _path_id(request: web.Request) -> int:
    return parse_batch_id(request.match_info["batch_id"])


def _header_json(batch_id: int, header: BatchHeader) -> dict[str, Any]:
    """A batch as the describe and incr routes answer it (Carlyle's field names)."""
    return {
        "batchId": batch_id,
        "userKey": header.user_key,
        "mode": header.mode,
        "isClosed": header.closed,
        "isComplete": header.complete,
        "items": header.items,
        "pending": header.pending,
        "createdAt": header.created_ms,
        "updatedAt": header.updated_ms,
        "completedAt": header.completed_ms or None,
    }


def _completions(done: list[Completion]) -> dict[str, Any]:
    return {
        "batchCompletions": [
            {"batchId": c.batch_id, "userKey": c.user_key, "completedAt": c.completed_ms}
            for c in done
        ]
    }


def _since_ms(request: web.Request) -> int:
    """``?since=``: epoch milliseconds or an ISO-8601 time; batches last active before it go."""
    text = request.query.get("since")
    if text is None:
        raise InvalidInput("since is required: epoch milliseconds or an ISO-8601 time")
    if is_decimal(text) and len(text) <= 15:
        return int(text)
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"since={text!r} is neither epoch milliseconds nor ISO-8601") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


async def _open(request: web.Request, mode: str) -> web.Response:
    body = await _object(request, optional=True)
    user_key = body.get("userKey")
    if user_key is not None and not isinstance(user_key, str):
        raise InvalidInput("userKey must be a string")
    batch_id = await _service(request).open(mode, user_key)
    return json_response({"batchId": batch_id})


async def _remove_older(request: web.Request, mode: str, closed: bool) -> web.Response:
    batches, items = await _service(request).remove_older(mode, closed, _since_ms(request))
    return json_response({"batchesRemoved": batches, "itemsRemoved": items})


def _shared_routes(base: str, mode: str) -> None:
    """Open, describe, delete and age-out: the same in both modes."""

    async def open_batch(request: web.Request) -> web.Response:
        return await _open(request, mode)

    async def describe(request: web.Request) -> web.Response:
        batch_id = _path_id(request)
        header = await _service(request).get(batch_id, mode)
        out = _header_json(batch_id, header)
        if header.mode == "exact":
            out["failedItems"] = await _service(request).failed_items(batch_id)
        return json_response(out)

    async def delete(request: web.Request) -> web.Response:
        items = await _service(request).delete(_path_id(request), mode)
        return json_response({"batchesRemoved": 1, "itemsRemoved": items})

    async def remove_open(request: web.Request) -> web.Response:
        return await _remove_older(request, mode, closed=False)

    async def remove_closed(request: web.Request) -> web.Response:
        return await _remove_older(request, mode, closed=True)

    routes.post(base)(open_batch)
    routes.post(base + "/")(open_batch)
    # The fixed paths first: aiohttp tries routes in the order they were added.
    routes.delete(base + "/open")(remove_open)
    routes.delete(base + "/closed")(remove_closed)
    routes.get(f"{base}/{_ID}")(describe)
    routes.delete(f"{base}/{_ID}")(delete)


_shared_routes(EXACT_BASE, EXACT)
_shared_routes(ESTIMATED_BASE, ESTIMATED)


# exact -----------------------------------------------------------------------


@routes.post(f"{EXACT_BASE}/close/{_ID}")
async def exact_close(request: web.Request) -> web.Response:
    complete = await _service(request).close(_path_id(request), EXACT)
    return json_response({"isComplete": complete})


@routes.post(EXACT_BASE + "/items")
async def exact_add_items(request: web.Request) -> web.Response:
    body = await _object(request)
    batch_id = _batch_id(body.get("batchId"))
    items = body.get("items")
    if isinstance(items, bool) or not isinstance(items, int):
        raise InvalidInput("items must be a positive integer (how many items to add)")
    blocks = await _service(request).add_items(batch_id, items)
    return json_response({"batchItemGroupIds": [{"id": str(b), "upto": n} for b, n in blocks]})


@routes.post(EXACT_BASE + "/items/ack")
async def exact_ack(request: web.Request) -> web.Response:
    ids = _bounded_list(await _object(request), "batchItemIds", "item ids")
    refs = [parse_item_id(i) for i in ids]
    return json_response(_completions(await _service(request).ack(refs)))


# estimated -------------------------------------------------------------------


@routes.post(f"{ESTIMATED_BASE}/{_ID}/close")
async def estimated_close(request: web.Request) -> web.Response:
    complete = await _service(request).close(_path_id(request), ESTIMATED)
    return json_response({"isComplete": complete})


@routes.post(f"{ESTIMATED_BASE}/{_ID}/incr")
async def estimated_incr(request: web.Request) -> web.Response:
    text = request.query.get("by", "1")
    if not is_decimal(text) or len(text) > 12:
        raise InvalidInput(f"by={text!r} must be a positive integer")
    batch_id = _path_id(request)
    header = await _service(request).incr(batch_id, int(text))
    return json_response(_header_json(batch_id, header))


@routes.post(ESTIMATED_BASE + "/decr")
async def estimated_decr(request: web.Request) -> web.Response:
    acks = _bounded_list(await _object(request), "acks", "{batchId, by} objects")
    parsed: list[tuple[int, int]] = []
    for i, a in enumerate(acks):
        if not isinstance(a, dict):
            raise InvalidInput(f"acks[{i}] must be an object {{batchId, by}}")
        extra = sorted(map(str, set(a) - {"batchId", "by"}))
        if extra:  # a misspelt "by" would count one, silently
            raise InvalidInput(f"acks[{i}]: unknown member {extra[0]!r}; expected batchId, by")
        by = a.get("by", 1)
        if isinstance(by, bool) or not isinstance(by, int):
            raise InvalidInput(f"acks[{i}].by must be a positive integer")
        parsed.append((_batch_id(a.get("batchId"), f"acks[{i}].batchId"), by))
    try:
        done = await _service(request).decr(parsed)
    except DecrIncomplete as exc:
        # Carlyle's answer shape plus what failed: the applied decrements must
        # not be retried (they would count twice), and their completions are
        # reported here or nowhere.
        body = {"error": exc.message, "code": exc.code, **_completions(exc.completions)}
        body["failed"] = [
            {"batchId": f.batch_id, "by": f.by, "code": f.error.code, "error": f.error.message}
            for f in exc.failed
        ]
        return json_response(body, exc.status)
    return json_response(_completions(done))
