"""Typed persistent streams over HTTP (Sherlock's interface); see :mod:`dynaq.streams`.

``GET /v2/streams/{name}`` is a chunked response: it replays from the chosen
start, then keeps the response open and writes entries as they are appended,
until a stop condition (``n``, ``until``, ``stop_after_bytes``), ``nowait``
catching up, ``DELETE .../subscriptions/{id}``, or the stream's deletion.
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from aiohttp import web

from dynaq.api.codec import json_response, read_body, read_raw
from dynaq.api.keys import FORWARDER, STREAMS, WORKER_OF
from dynaq.api.params import body_object, is_decimal
from dynaq.api.stream_copies import COPIES, copies_timeout
from dynaq.api.stream_proxy import FORWARDED_HEADER
from dynaq.api.topic_history import HISTORY_SIGNATURE
from dynaq.errors import InvalidInput, InvalidName
from dynaq.services.queue_records import history_stream
from dynaq.streams import CONTENT_TYPES, FORMATS, Chunk, Start, Stops, StreamService
from dynaq.streams.retention import parse_retention

TOKEN_HEADER = "X-Publisher-Token"
SUBSCRIPTION_HEADER = "X-Subscription-Id"
SIZE_HEADER = "X-Stream-Size"
FIRST_HEADER = "X-Stream-First"
"""The first index retention has left: a read from an earlier index starts there."""
MAX_INDEX = 2**63 - 1
MAX_ENTRIES = 100_000
"""Most entries one append may carry (the request size limit applies as well)."""
MIN_LEASE_S, MAX_LEASE_S = 0.1, 86_400.0
LISTEN_PARAMS = frozenset(
    {"i", "tail", "since", "recent", "n", "until", "stop_after_bytes", "nowait", "format"}
    | {"sizeonly"}
)
HIDDEN_PREFIX = "_cues."
"""Streams named so back processors (:mod:`dynaq.processors`): listed only when asked
with ``?hidden=true``."""
RESERVED_PREFIX = history_stream("")
"""``topic.<name>`` keeps a topic's history (:mod:`dynaq.api.topic_history`), which
declares it: through this API such a stream is read, never declared or deleted."""
_TRUE = ("", "1", "true", "yes")
_FALSE = ("0", "false", "no")

routes = web.RouteTableDef()


def _service(request: web.Request) -> StreamService:
    return request.app[STREAMS]


async def _elsewhere(request: web.Request, *, declaring: bool = False) -> web.StreamResponse | None:
    """The authority's answer when another node serves the stream; ``None`` to serve here."""
    fwd = request.app.get(FORWARDER)
    if fwd is None:
        return None
    name = request.match_info["name"]
    to = await fwd.target(request, name, declaring=declaring)
    return None if to is None else await fwd.forward(request, to, name)


def _not_reserved(request: web.Request, doing: str) -> None:
    """Refuse (422 ``invalid_name``) to declare or delete a topic's history stream. A
    ``topic.*`` stream that is not one (declared through this API before the names
    were reserved) may still be deleted, so that the topic's history can be kept."""
    name = request.match_info["name"]
    if not name.startswith(RESERVED_PREFIX):
        return
    svc = _service(request)
    if doing == "deleted" and name in svc.names() and svc.info(name).signature != HISTORY_SIGNATURE:
        return
    topic = name[len(RESERVED_PREFIX) :]
    raise InvalidName(
        f"stream names starting with {RESERVED_PREFIX!r} are reserved for topic history: "
        f"{name!r} cannot be {doing} through the streams API, only read "
        f'(PATCH /v2/topics/{topic} {{"history": true|false}} starts or stops keeping it)'
    )


def _int(query: Mapping[str, str], name: str, lo: int = 0) -> int | None:
    text = query.get(name)
    if text is None:
        return None
    if not is_decimal(text) or len(text) > 19 or not lo <= int(text) <= MAX_INDEX:
        raise InvalidInput(f"query parameter {name} must be a decimal integer in {lo}..2^63-1")
    return int(text)


def _flag(query: Mapping[str, str], name: str) -> bool:
    text = query.get(name)
    if text is None:
        return False
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise InvalidInput(f"query parameter {name} must be true or false")


def _listen_params(query: Mapping[str, str]) -> tuple[Start, Stops, str, bool]:
    unknown = sorted(set(query) - LISTEN_PARAMS)
    if unknown:
        raise InvalidInput(f"unknown query parameter {unknown[0]!r}")
    start = Start(_int(query, "i"), _int(query, "tail"), _int(query, "since"))
    start.recent_ms = _int(query, "recent")
    given = [k for k in ("i", "tail", "since", "recent") if k in query]
    if len(given) > 1:
        raise InvalidInput(f"give at most one of i, tail, since, recent (got {', '.join(given)})")
    stops = Stops(_int(query, "n", 1), _int(query, "until"), _int(query, "stop_after_bytes", 1))
    fmt = query.get("format", "jsonl")
    if fmt not in FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(FORMATS)}")
    return start, stops, fmt, _flag(query, "nowait")


def _check_finite(value: Any, where: str, depth: int = 0) -> None:
    """What every format a stream is read in (and its copies are sent in) carries: msgpack
    carries NaN and infinities, JSON does not; JSON carries any integer, msgpack
    those in -2^63..2^64-1 (a copy of a stream that held a larger one could never be
    made: every append then timed out waiting for its quorum)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(f"{where} holds {value}, which JSON cannot represent")
    if isinstance(value, int) and not -(2**63) <= value < 2**64:
        raise InvalidInput(f"{where} holds an integer outside -2^63..2^64-1")
    if depth > 64:
        raise InvalidInput(f"{where} is nested deeper than 64 levels")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_finite(v, f"{where}.{k}", depth + 1)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_finite(v, f"{where}[{i}]", depth + 1)


def _token(request: web.Request) -> int | None:
    text = request.headers.get(TOKEN_HEADER)
    if text is None:
        return None
    t = text.strip()
    if not is_decimal(t) or len(t) > 19 or int(t) > MAX_INDEX:
        raise InvalidInput(f"{TOKEN_HEADER} must be a decimal integer (the lease's token)")
    return int(t)


@routes.get("/v2/streams")
async def list_streams(request: web.Request) -> web.Response:
    """Every stream of the ring (each node lists its own; this one asks the others);
    processors' backing streams (``_cues.*``) only with ``?hidden=true``."""
    unknown = sorted(set(request.query) - {"hidden"})
    if unknown:
        raise InvalidInput(f"unknown query parameter {unknown[0]!r}")
    if request.query.get("hidden") == "":
        # Unlike Sherlock's bare ?nowait, hidden has no short form: say true or false.
        raise InvalidInput("query parameter hidden must be true or false")
    hidden = _flag(request.query, "hidden")
    svc = _service(request)
    fwd = request.app.get(FORWARDER)
    copies = request.app.get(COPIES)
    out: list[dict[str, Any]] = []
    for name in svc.names():
        if name.startswith(HIDDEN_PREFIX) and not hidden:
            continue
        if fwd is not None and not await fwd.authority.serves_here(name):
            continue  # a copy of another node's stream (that node lists it), or a deleted one's
        info = svc.info(name)
        out.append(
            {
                "name": name,
                "order_key": info.order_key,
                "signature": info.signature,
                "size": info.size,
                "segments": info.segments,
                "fsyncs": info.fsyncs,
            }
        )
        if copies is not None:
            out[-1]["copies"] = copies.sizes(name)
    if fwd is None or FORWARDED_HEADER in request.headers:
        return json_response({"streams": out})
    theirs, unreachable = await fwd.list_elsewhere(request)
    of = request.app.get(WORKER_OF)  # a node of workers is one node to its clients
    for entry in out if of is None else [*out, *theirs]:
        entry["node"] = fwd.authority.me if of is None else of.node
    out.extend(theirs)
    out.sort(key=lambda e: str(e["name"]))
    answer: dict[str, Any] = {"streams": out}
    if unreachable:
        answer["unreachable_nodes"] = unreachable
    return json_response(answer)


@routes.put("/v2/streams/{name}")
async def declare(request: web.Request) -> web.StreamResponse:
    _not_reserved(request, "declared")
    if (there := await _elsewhere(request, declaring=True)) is not None:
        return there
    body = body_object(await read_body(request))
    extra = sorted(set(body) - {"schema", "order_key", "retention"})
    if extra:
        raise InvalidInput(f"unknown member {extra[0]!r}; expected schema, order_key, retention")
    if "schema" not in body:
        raise InvalidInput("schema is required (a JSON Schema object)")
    _check_finite(body["schema"], "schema")
    name = request.match_info["name"]
    retention = None if body.get("retention") is None else parse_retention(body["retention"])
    created, extended = await _service(request).declare(
        name, body["schema"], body.get("order_key"), retention
    )
    info = _service(request).info(name)
    return json_response(
        {
            "name": name,
            "signature": info.signature,
            "order_key": info.order_key,
            "created": created,
            "extended": extended,
            "retention": _service(request).retention(name),
        },
        201 if created else 200,
    )


@routes.delete("/v2/streams/{name}")
async def delete(request: web.Request) -> web.StreamResponse:
    if (there := await _elsewhere(request)) is not None:
        return there
    _not_reserved(request, "deleted")  # here, where the stream is served
    await _service(request).delete(request.match_info["name"])
    fwd, copies = request.app.get(FORWARDER), request.app.get(COPIES)
    if fwd is not None:
        await fwd.authority.forget(request.match_info["name"])
    if copies is not None:
        copies.forget(request.match_info["name"])
    return web.Response(status=204)


@routes.get("/v2/streams/{name}/schema")
async def schema(request: web.Request) -> web.StreamResponse:
    if (there := await _elsewhere(request)) is not None:
        return there
    info = _service(request).info(request.match_info["name"])
    return json_response(
        {
            "name": info.name,
            "schema": info.schema,
            "order_key": info.order_key,
            "signature": info.signature,
        }
    )


@routes.post("/v2/streams/{name}/entries")
async def append(request: web.Request) -> web.StreamResponse:
    if (there := await _elsewhere(request)) is not None:
        return there
    svc = _service(request)
    name = request.match_info["name"]
    svc.info(name)  # 404/503 before reading a large body
    token = _token(request)
    unknown = sorted(set(request.query) - {"expect_index"})
    if unknown:
        raise InvalidInput(f"unknown query parameter {unknown[0]!r}")
    expect = _int(request.query, "expect_index")
    # Entries are objects (some nested): up to 8 per entry within the request limit.
    body = body_object(await read_body(request, max_items=MAX_ENTRIES, max_objects=8 * MAX_ENTRIES))
    entries = body.get("entries")
    if set(body) != {"entries"}:
        extra = sorted(set(body) - {"entries"})
        raise InvalidInput(f"unknown member {extra[0]!r}" if extra else "entries is required")
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_ENTRIES:
        raise InvalidInput(f"entries must be an array of 1..{MAX_ENTRIES} entries")
    for i, entry in enumerate(entries):
        _check_finite(entry, f"entries[{i}]")
    staged = await svc.append(name, entries, token, expect)
    copies = request.app.get(COPIES)
    if copies is not None:  # a ring: acknowledged once a quorum of the copies hold it
        await copies.wait(name, staged.first_index + staged.count, copies_timeout(request))
    return json_response({"first_index": staged.first_index, "count": staged.count})


@routes.post("/v2/streams/{name}/publisher")
async def acquire(request: web.Request) -> web.StreamResponse:
    if (there := await _elsewhere(request)) is not None:
        return there
    raw = await read_raw(request)
    ttl: float | None = None
    if raw.strip():
        body = body_object(await read_body(request))
        extra = sorted(set(body) - {"ttl_s"})
        if extra:
            raise InvalidInput(f"unknown member {extra[0]!r}; expected ttl_s")
        if "ttl_s" in body:
            value: Any = body["ttl_s"]
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not MIN_LEASE_S <= value <= MAX_LEASE_S
            ):
                raise InvalidInput(f"ttl_s must be a number of seconds in {MIN_LEASE_S}..86400")
            ttl = float(value)
    token, ttl_s = await _service(request).acquire(request.match_info["name"], _token(request), ttl)
    return json_response({"token": token, "ttl_s": ttl_s}, 201)


@routes.delete("/v2/streams/{name}/publisher")
async def release(request: web.Request) -> web.StreamResponse:
    if (there := await _elsewhere(request)) is not None:
        return there
    token = _token(request)
    if token is None:
        raise InvalidInput(f"{TOKEN_HEADER} is required to release the publisher lease")
    _service(request).release(request.match_info["name"], token)
    return web.Response(status=204)


@routes.delete("/v2/streams/{name}/subscriptions/{id}")
async def terminate(request: web.Request) -> web.StreamResponse:
    if (there := await _elsewhere(request)) is not None:
        return there
    _service(request).terminate(request.match_info["name"], request.match_info["id"])
    return web.Response(status=204)


async def _copy_serves(request: web.Request) -> bool:
    """Whether this node's copy may answer a read by itself: a ``nowait`` read of
    what is there (a live listen and the size come from the authority), from a
    copy written under the stream's current epoch, so a prefix of the authority's
    (it may lag by the replication delay)."""
    fwd = request.app.get(FORWARDER)
    name = request.match_info["name"]
    svc = _service(request)
    if fwd is None or FORWARDED_HEADER in request.headers or request.method == "HEAD":
        return False
    if not _flag(request.query, "nowait") or _flag(request.query, "sizeonly"):
        return False
    if name not in svc.names() or await fwd.authority.node_of(name) in (None, fwd.authority.me):
        return False  # no copy here, or this node serves the stream itself (cached lookup)
    got = await fwd.authority.record_of(name)
    return got is not None and not got[0].deleted and svc.epoch(name) == got[0].epoch


@routes.get("/v2/streams/{name}")
async def listen(request: web.Request) -> web.StreamResponse:
    if not await _copy_serves(request) and (there := await _elsewhere(request)) is not None:
        return there
    svc = _service(request)
    name = request.match_info["name"]
    query = request.query
    if request.method == "HEAD" or _flag(query, "sizeonly"):
        if request.method != "HEAD":
            _listen_params(query)
        info = svc.info(name)
        held = {SIZE_HEADER: str(info.size), FIRST_HEADER: str(info.first_index)}
        if request.method == "HEAD":
            return web.Response(headers=held)
        sized = json_response({"size": info.size})
        sized.headers.update(held)
        return sized
    start, stops, fmt, nowait = _listen_params(query)
    sub = svc.subscribe(name, start, stops, fmt)

    def alive() -> bool:
        transport = request.transport
        return transport is not None and not transport.is_closing()

    chunks: AsyncGenerator[Chunk, None] = svc.chunks(sub, nowait, alive)
    info = svc.info(name)
    headers = {
        SUBSCRIPTION_HEADER: sub.id,
        SIZE_HEADER: str(info.size),
        FIRST_HEADER: str(info.first_index),  # a read from before it starts there
    }
    try:
        first = None
        if nowait:
            first = await anext(chunks, None)
            if first is None or not first.data:
                return web.Response(status=204, headers=headers)
        resp = web.StreamResponse(headers=headers)
        resp.content_type = CONTENT_TYPES[fmt]
        resp.enable_chunked_encoding()
        try:
            await resp.prepare(request)
            if fmt == "array":
                await resp.write(b"[")
            if first is not None:
                await resp.write(first.data)
            async for chunk in chunks:
                await resp.write(chunk.data)
            if fmt == "array":
                await resp.write(b"]")
            await resp.write_eof()
        except ConnectionError:
            pass  # the listener went away: nothing to answer
        return resp
    finally:
        await chunks.aclose()
        svc.unsubscribe(sub)
