"""The authority's side of stream copies: the signed node-to-node routes a follower
uses (:mod:`dynaq.core.stream_copies`), and the quorum wait of an append."""

from __future__ import annotations

from typing import Any

import msgpack
from aiohttp import web

from dynaq.api.codec import read_raw
from dynaq.api.keys import FORWARDER, STREAMS
from dynaq.api.topic_history import HISTORY
from dynaq.core.stream_copies import (
    DECLARED_PATH,
    FOLLOW_PATH,
    HISTORY_PATH,
    REPORT_PATH,
    SIZE_PATH,
)
from dynaq.errors import DynaqError, InvalidInput
from dynaq.streams import Start, Stops, StreamService
from dynaq.streams.replicas import CopySizes

COPIES = web.AppKey("stream_copies", CopySizes)
"""Present in a ring: followers' reported sizes and the quorum an append waits for."""
QUORUM_TIMEOUT: web.AppKey[float] = web.AppKey("stream_quorum_timeout_s")


def copies_timeout(request: web.Request) -> float:
    """How long an append waits for its quorum (``streams.quorum_timeout_s``)."""
    return request.app.get(QUORUM_TIMEOUT, 5.0)


routes = web.RouteTableDef()
_MSGPACK = "application/msgpack"


def _body(raw: bytes, *fields: str) -> dict[str, Any]:
    try:
        body = msgpack.unpackb(raw)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise InvalidInput(f"malformed stream copy request: {exc}") from None
    if not isinstance(body, dict) or any(f not in body for f in fields):
        raise InvalidInput(f"malformed stream copy request: expected a map with {fields}")
    return body


def _streams(request: web.Request) -> StreamService:
    return request.app[STREAMS]


@routes.post(DECLARED_PATH)
async def declared(request: web.Request) -> web.Response:
    body = _body(await read_raw(request), "stream")
    info = _streams(request).info(str(body["stream"]))
    answer = {"schema": info.schema, "order_key": info.order_key, "signature": info.signature}
    return web.Response(body=msgpack.packb(answer), content_type=_MSGPACK)


@routes.post(SIZE_PATH)
async def size(request: web.Request) -> web.Response:
    """How much of the stream this node holds (``null``: no copy it can serve)."""
    body = _body(await read_raw(request), "stream")
    try:
        held: int | None = _streams(request).info(str(body["stream"])).size
    except DynaqError:
        held = None
    return web.Response(body=msgpack.packb({"size": held}), content_type=_MSGPACK)


@routes.post(HISTORY_PATH)
async def history(request: web.Request) -> web.Response:
    """A topic's history entries, sent to this node as the stream's authority."""
    body = _body(await read_raw(request), "stream", "entries")
    stream, entries = str(body["stream"]), body["entries"]
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InvalidInput("malformed history: entries must be a list of maps")
    fwd = request.app.get(FORWARDER)
    if fwd is not None:
        await fwd.authority.check_local(stream)
    keeper = request.app.get(HISTORY)
    if keeper is None:
        raise InvalidInput("this node keeps no topic history")
    await keeper.append_here(stream, entries)
    return web.Response(body=msgpack.packb({"ok": True}), content_type=_MSGPACK)


@routes.post(REPORT_PATH)
async def report(request: web.Request) -> web.Response:
    body = _body(await read_raw(request), "stream", "node", "size")
    try:
        stream, node, size = str(body["stream"]), str(body["node"]), int(body["size"])
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"malformed stream copy report: {exc}") from None
    if not 0 <= size < 2**63:
        raise InvalidInput("malformed stream copy report: size must be 0..2^63-1")
    copies = request.app.get(COPIES)
    if copies is not None:
        copies.reported(stream, node, size)
    return web.Response(body=msgpack.packb({"ok": True}), content_type=_MSGPACK)


@routes.post(FOLLOW_PATH)
async def follow(request: web.Request) -> web.StreamResponse:
    """The entries from ``start`` on, then live, until the follower goes away, the
    stream is deleted or this node stops."""
    body = _body(await read_raw(request), "stream", "start")
    try:
        stream, start = str(body["stream"]), int(body["start"])
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"malformed follow request: {exc}") from None
    if not 0 <= start < 2**63:
        raise InvalidInput("malformed follow request: start must be an index (0..2^63-1)")
    svc = _streams(request)
    sub = svc.subscribe(stream, Start(i=start), Stops(None, None, None), "msgpack")

    def alive() -> bool:
        transport = request.transport
        return transport is not None and not transport.is_closing()

    chunks = svc.chunks(sub, False, alive)
    try:
        resp = web.StreamResponse()
        resp.content_type = _MSGPACK
        resp.enable_chunked_encoding()
        try:
            await resp.prepare(request)
            async for chunk in chunks:
                await resp.write(chunk.data)
            await resp.write_eof()
        except ConnectionError:
            pass  # the follower went away; it comes back from its size
        return resp
    finally:
        await chunks.aclose()
        svc.unsubscribe(sub)
