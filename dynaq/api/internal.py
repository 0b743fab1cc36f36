"""Node-to-node routes (never exposed through HAProxy): hints, the in-flight handover,
catalog news, forwarded receives and receipts.

Every request under ``/internal/`` must carry a valid, fresh, unreplayed MAC
(:mod:`dynaq.core.peer_auth`), checked by :func:`check_peer` (from the front middleware) before
any handler runs, whatever the client-token settings. A node without a cluster
secret (``gossip.key``) refuses them all: only ring members need them, and a
ring member without the secret could not prove it is one.
"""

from __future__ import annotations

import contextlib
from typing import Any

import msgpack
from aiohttp import web

from dynaq.api.codec import json_response, read_raw
from dynaq.api.keys import CATALOG, QUEUES, VIEW
from dynaq.core.hints import (
    CATALOG_NEWS_PATH,
    HINTS_PATH,
    RECEIPT_DELETE_PATH,
    RECEIPT_HOLD_PATH,
    STATS_PATH,
    VISIBILITY_PATH,
    decode_hints,
)
from dynaq.core.peer_auth import (
    INTERNAL_PREFIX,
    PEER_AUTH_HEADER,
    PEER_CHALLENGE,
    PeerVerifier,
)
from dynaq.core.peer_receive import RECEIVE_PATH, WATCH_PATH, message_to_wire
from dynaq.errors import InvalidInput, NotServing, QueueNotFound, TopicNotFound, Unauthorized
from dynaq.services.catalog_topics import QUEUE_NEWS, TOPIC_NEWS

PEER_VERIFIER = web.AppKey("peer_verifier", PeerVerifier)


routes = web.RouteTableDef()
MAX_WATCH_S = 20.0


def _is_internal(request: web.Request) -> bool:
    resource = request.match_info.route.resource
    canonical = resource.canonical if resource is not None else ""
    return request.path.startswith(INTERNAL_PREFIX) or canonical.startswith(INTERNAL_PREFIX)


def is_internal(request: web.Request) -> bool:
    """Whether ``request`` is for a node-to-node route (see :func:`check_peer`)."""
    return _is_internal(request)


async def check_peer(request: web.Request) -> None:
    """Refuse an ``/internal/`` request that a ring member did not sign for this node."""
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


@routes.post(HINTS_PATH)
async def receive_hints(request: web.Request) -> web.Response:
    """Apply hints sent by a peer; a malformed message is a 422 (InvalidInput)."""
    message = decode_hints(await read_raw(request))
    service = request.app[QUEUES]
    if message.handover and service.receiver.draining:
        # This node is leaving too (a ring stopped at once): in-flight entries taken
        # now would be lost at its exit. Refused, the sender parks them instead.
        raise NotServing("this node is leaving: it takes no in-flight handover")
    for queue, hints in message.queues.items():
        service.hints.apply_hints(queue, hints.deleted, hints.lanes, hints.rewind)
    for queue, entries in message.handover.items():
        epoch = service.handoff.epoch
        await service.hints.apply_handover(queue, entries)
        if message.handoff_from is not None:  # a lane handoff, not a leave's handover
            service.handoff.pass_on(queue, [e.message_id for e in entries], epoch)
    if message.released_by is not None:
        service.handoff.note_released(message.released_by)
    for queue in message.recheck:
        await service.hints.recheck_in_flight(queue)
    return json_response({"ok": True})


@routes.post(CATALOG_NEWS_PATH)
async def catalog_news(request: web.Request) -> web.Response:
    """A peer changed one queue's or topic's config: re-read that record from the store
    now (listeners fire; a deleted queue leaves the cache and is cached as missing),
    so this node acts on the change before the peer acknowledges it. 200 once done,
    whether or not the record still exists."""
    try:
        body = msgpack.unpackb(await read_raw(request))
        kind, name = body["kind"], body["name"]
    except (ValueError, TypeError, LookupError, AttributeError, msgpack.UnpackException) as exc:
        raise InvalidInput(f"malformed catalog news: {exc}") from None
    if not isinstance(name, str) or not name:
        raise InvalidInput("malformed catalog news: name must be a non-empty string")
    catalog = request.app[CATALOG]
    if kind in (QUEUE_NEWS, TOPIC_NEWS):
        catalog.mark_stale(kind, name)  # at once: the sender may not wait for the re-read
    if kind == QUEUE_NEWS:
        with contextlib.suppress(QueueNotFound):
            await catalog.queue(name, fresh=True)
    elif kind == TOPIC_NEWS:
        with contextlib.suppress(TopicNotFound):
            await catalog.topic(name, fresh=True)
    else:
        raise InvalidInput(f"malformed catalog news: unknown kind {kind!r}")
    return json_response({"ok": True})


def _forwarded(raw: bytes, what: str) -> tuple[dict[str, Any], list[int], list[int] | None]:
    """A forwarded request: its body, its ids and (for receipts) one delivery per id."""
    try:
        body = msgpack.unpackb(raw)
        ids = [int(i) for i in body["ids"]]
        deliveries = body.get("deliveries")
        if deliveries is not None:
            deliveries = [int(d) for d in deliveries]
    except (ValueError, TypeError, LookupError, AttributeError, msgpack.UnpackException) as exc:
        raise InvalidInput(f"malformed {what}: {exc}") from None
    if deliveries is not None and len(deliveries) != len(ids):
        raise InvalidInput(f"malformed {what}: one delivery per id")
    return dict(body), ids, deliveries


@routes.post(VISIBILITY_PATH)
async def change_visibility(request: web.Request) -> web.Response:
    """A visibility change a peer forwarded for messages of this node's slice."""
    body, ids, deliveries = _forwarded(await read_raw(request), "visibility change")
    try:
        queue, vt = str(body["queue"]), float(body["visibility_timeout_s"])
    except (ValueError, TypeError, LookupError) as exc:
        raise InvalidInput(f"malformed visibility change: {exc}") from None
    info = await request.app[CATALOG].queue(queue)
    service = request.app[QUEUES]
    answer: dict[str, list[int]]
    if deliveries is None:
        answer = {"changed": service.states.change_visibility(info, ids, vt)}
    else:
        pairs = list(zip(ids, deliveries, strict=True))
        changed, stale = service.receipts.change_visibility_here(info, pairs, vt)
        answer = {"changed": changed, "stale": stale}
    return web.Response(body=msgpack.packb(answer), content_type="application/msgpack")


@routes.post(RECEIPT_DELETE_PATH)
async def delete_receipts(request: web.Request) -> web.Response:
    """A receipt-checked delete a peer forwarded for messages this node served."""
    body, ids, deliveries = _forwarded(await read_raw(request), "receipt delete")
    if deliveries is None:
        raise InvalidInput("malformed receipt delete: deliveries missing")
    info = await request.app[CATALOG].queue(str(body.get("queue")))
    pairs = list(zip(ids, deliveries, strict=True))
    deleted, stale = await request.app[QUEUES].receipts.delete_here(info, pairs)
    answer = {"deleted": deleted, "stale": stale}
    return web.Response(body=msgpack.packb(answer), content_type="application/msgpack")


@routes.post(RECEIPT_HOLD_PATH)
async def hold_receipts(request: web.Request) -> web.Response:
    """A transaction's receipts for messages this node served: check and claim them (or
    release the claims of a transaction that did not commit)."""
    body, ids, deliveries = _forwarded(await read_raw(request), "receipt hold")
    if deliveries is None:
        raise InvalidInput("malformed receipt hold: deliveries missing")
    info = await request.app[CATALOG].queue(str(body.get("queue")))
    release = body.get("release", False)
    if not isinstance(release, bool):
        raise InvalidInput("malformed receipt hold: release must be a boolean")
    pairs = list(zip(ids, deliveries, strict=True))
    stale, busy = request.app[QUEUES].receipts.hold_here(info, pairs, release=release)
    answer = {"stale": stale, "busy": busy}
    return web.Response(body=msgpack.packb(answer), content_type="application/msgpack")


@routes.post(RECEIVE_PATH)
async def receive_here(request: web.Request) -> web.Response:
    """A receive from this node's slice for a peer's long poll (no waiting)."""
    try:
        body = msgpack.unpackb(await read_raw(request))
        queue, n = str(body["queue"]), int(body["max_messages"])
        vt = float(body["visibility_timeout_s"])
        per_group = int(body.get("per_group", 1))
        # What a receive begun on another worker has left of its byte budget.
        max_bytes = None if body.get("max_bytes") is None else int(body["max_bytes"])
    except (ValueError, TypeError, LookupError, AttributeError, msgpack.UnpackException) as exc:
        raise InvalidInput(f"malformed forwarded receive: {exc}") from None
    if max_bytes is not None and max_bytes < 1:
        raise InvalidInput("malformed forwarded receive: max_bytes must be at least 1")
    receiver = request.app[QUEUES].receiver
    messages = await receiver.receive(queue, n, vt, per_group=per_group, max_bytes=max_bytes)
    answer = {"messages": [message_to_wire(m) for m in messages]}
    return web.Response(body=msgpack.packb(answer), content_type="application/msgpack")


@routes.post(WATCH_PATH)
async def watch(request: web.Request) -> web.Response:
    """Wait until this node may have something visible in a queue (serves nothing)."""
    try:
        body = msgpack.unpackb(await read_raw(request))
        queue, wait_s = str(body["queue"]), float(body["wait_s"])
    except (ValueError, TypeError, LookupError, AttributeError, msgpack.UnpackException) as exc:
        raise InvalidInput(f"malformed watch: {exc}") from None
    if not 0 <= wait_s <= MAX_WATCH_S:
        raise InvalidInput(f"wait_s must be in 0..{MAX_WATCH_S:g}")
    ready = await request.app[QUEUES].receiver.watch(queue, wait_s)
    return web.Response(body=msgpack.packb({"ready": ready}), content_type="application/msgpack")


@routes.post(STATS_PATH)
async def slice_stats(request: web.Request) -> web.Response:
    """This node's figures for its slice of a queue (a peer sums them over the ring)."""
    try:
        queue = str(msgpack.unpackb(await read_raw(request))["queue"])
    except (ValueError, TypeError, LookupError, msgpack.UnpackException) as exc:
        raise InvalidInput(f"malformed stats request: {exc}") from None
    info = await request.app[CATALOG].queue(queue)
    service = request.app[QUEUES]
    stats = (await service.statistics.live(info)).to_wire()
    # And the partitions it cuts its slice into (a worker lists its node's: bulk.py).
    parts = [(r.bottom_id, r.top_id) for r in service.partition_ranges(info)]
    answer = msgpack.packb({**stats, "partitions": parts})
    return web.Response(body=answer, content_type="application/msgpack")
