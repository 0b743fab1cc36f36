"""Node-to-node routes (never exposed through HAProxy): hints and the in-flight handover.

Every request under ``/internal/`` must carry a valid, fresh, unreplayed MAC
(:mod:`dynaq.core.peer_auth`), checked by :func:`peer_auth_middleware` before
any handler runs, whatever the client-token settings. A node without a cluster
secret (``gossip.key``) refuses them all: only ring members need them, and a
ring member without the secret could not prove it is one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgpack
from aiohttp import web

from dynaq.api.codec import json_response, read_raw
from dynaq.api.keys import CATALOG, QUEUES, VIEW
from dynaq.core.hints import HINTS_PATH, STATS_PATH, VISIBILITY_PATH, decode_hints
from dynaq.core.peer_auth import (
    INTERNAL_PREFIX,
    PEER_AUTH_HEADER,
    PEER_CHALLENGE,
    PeerVerifier,
)
from dynaq.errors import InvalidInput, Unauthorized

PEER_VERIFIER = web.AppKey("peer_verifier", PeerVerifier)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

routes = web.RouteTableDef()


def _is_internal(request: web.Request) -> bool:
    resource = request.match_info.route.resource
    canonical = resource.canonical if resource is not None else ""
    return request.path.startswith(INTERNAL_PREFIX) or canonical.startswith(INTERNAL_PREFIX)


@web.middleware
async def peer_auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse any ``/internal/`` request that a ring member did not sign for this node."""
    if not _is_internal(request):
        return await handler(request)
    verifier = request.app.get(PEER_VERIFIER)
    if verifier is None:
        raise Unauthorized(
            "node-to-node routes are off: this node has no gossip.key", PEER_CHALLENGE
        )
    # A missing, malformed or stale header is refused before the body is read.
    audience = request.app[VIEW].me.http_addr
    stamp = verifier.check_stamp(request.headers.get(PEER_AUTH_HEADER), audience)
    body = await read_raw(request)  # cached: the handler reads the same bytes
    verifier.verify(stamp, request.method, audience, request.raw_path, body)
    return await handler(request)


@routes.post(HINTS_PATH)
async def receive_hints(request: web.Request) -> web.Response:
    """Apply hints sent by a peer; a malformed message is a 422 (InvalidInput)."""
    message = decode_hints(await read_raw(request))
    service = request.app[QUEUES]
    for queue, hints in message.queues.items():
        service.apply_hints(queue, hints.deleted, hints.lanes, hints.rewind)
    for queue, entries in message.handover.items():
        service.apply_handover(queue, entries)
    return json_response({"ok": True})


@routes.post(VISIBILITY_PATH)
async def change_visibility(request: web.Request) -> web.Response:
    """A visibility change a peer forwarded for messages of this node's slice."""
    try:
        body = msgpack.unpackb(await read_raw(request))
        queue, ids = str(body["queue"]), [int(i) for i in body["ids"]]
        vt = float(body["visibility_timeout_s"])
    except (ValueError, TypeError, LookupError, msgpack.UnpackException) as exc:
        raise InvalidInput(f"malformed visibility change: {exc}") from None
    info = await request.app[CATALOG].queue(queue)
    changed = request.app[QUEUES].change_visibility_here(info, ids, vt)
    return web.Response(
        body=msgpack.packb({"changed": changed}), content_type="application/msgpack"
    )


@routes.post(STATS_PATH)
async def slice_stats(request: web.Request) -> web.Response:
    """This node's figures for its slice of a queue (a peer sums them over the ring)."""
    try:
        queue = str(msgpack.unpackb(await read_raw(request))["queue"])
    except (ValueError, TypeError, LookupError, msgpack.UnpackException) as exc:
        raise InvalidInput(f"malformed stats request: {exc}") from None
    info = await request.app[CATALOG].queue(queue)
    stats = await request.app[QUEUES].statistics.of(info)
    return web.Response(body=msgpack.packb(stats.to_wire()), content_type="application/msgpack")
