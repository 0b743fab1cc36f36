"""Node-to-node routes (never exposed through HAProxy): hints and the in-flight handover."""

from __future__ import annotations

from aiohttp import web

from dynaq.api.codec import json_response
from dynaq.api.keys import QUEUES
from dynaq.core.hints import HINTS_PATH, decode_hints

routes = web.RouteTableDef()


@routes.post(HINTS_PATH)
async def receive_hints(request: web.Request) -> web.Response:
    """Apply hints sent by a peer; a malformed message is a 422 (InvalidInput)."""
    message = decode_hints(await request.read())
    service = request.app[QUEUES]
    for queue, hints in message.queues.items():
        service.apply_hints(queue, hints.deleted, hints.lanes, hints.rewind)
    for queue, entries in message.handover.items():
        service.apply_handover(queue, entries)
    return json_response({"ok": True})
