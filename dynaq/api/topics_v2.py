"""Topics in v2: a topic's description and settings, and replaying its history into a queue.

``PATCH /v2/topics/{topic}`` with ``{"history": true}`` keeps everything
published to the topic from then on in the stream ``topic.<name>`` (declared
at once, on its authority in a ring), which any listener reads like any
stream (``GET /v2/streams/topic.<name>?i=|since=<ms>``).
``POST /v2/topics/{topic}/replay`` puts up to ``max`` entries of that history,
from an index or a time, into a queue as its subscription to the topic would
have received them (its filter, raw or enveloped; everything, raw, when it is
not subscribed), and says where to continue. Replaying twice enqueues twice,
except messages whose dedup id the queue still remembers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgpack
from aiohttp import web

from dynaq.api.auth import require
from dynaq.api.codec import json_response, read_body
from dynaq.api.keys import CATALOG, FORWARDER, STREAMS, TOPICS
from dynaq.api.params import body_object
from dynaq.api.topic_history import HISTORY
from dynaq.core.access import WRITE
from dynaq.errors import InvalidInput, NotFound
from dynaq.services.queue_records import TopicInfo, history_stream
from dynaq.streams import Start, Stops

routes = web.RouteTableDef()
MAX_REPLAY = 100_000
DEFAULT_REPLAY = 10_000
_PAGE = 1_000


def _view(info: TopicInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "queues": list(info.queues),
        "history": info.history,
        "history_stream": history_stream(info.name) if info.history else None,
    }


def _count(body: Mapping[str, Any], name: str, lo: int, hi: int) -> int | None:
    if name not in body:
        return None
    value = body[name]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidInput(f"{name} must be an integer in {lo}..{hi}")
    return value


@routes.get("/v2/topics/{topic}")
async def describe(request: web.Request) -> web.Response:
    info = await request.app[CATALOG].topic(request.match_info["topic"], fresh=True)
    return json_response(_view(info))


@routes.patch("/v2/topics/{topic}")
async def configure(request: web.Request) -> web.Response:
    body = body_object(await read_body(request))
    extra = sorted(set(body) - {"history"})
    if extra:
        raise InvalidInput(f"unknown member {extra[0]!r}; expected history")
    on = body.get("history")
    if not isinstance(on, bool):
        raise InvalidInput("history must be true or false")
    name = request.match_info["topic"]
    await request.app[CATALOG].topic(name, fresh=True)  # 404 before anything else
    if on:  # the stream first: a history that cannot be kept is not switched on
        await request.app[HISTORY].keep(name, [])
    info = await request.app[CATALOG].set_topic_history(name, on)
    return json_response(_view(info))


@routes.post("/v2/topics/{topic}/replay")
async def replay(request: web.Request) -> web.StreamResponse:
    body = body_object(await read_body(request))
    extra = sorted(set(body) - {"queue", "from_index", "since_ms", "max"})
    if extra:
        raise InvalidInput(
            f"unknown member {extra[0]!r}; expected queue, from_index, since_ms, max"
        )
    queue = body.get("queue")
    if not isinstance(queue, str) or not queue:
        raise InvalidInput("queue (a queue's name) is required")
    from_index = _count(body, "from_index", 0, 2**63 - 1)
    since_ms = _count(body, "since_ms", 0, 2**63 - 1)
    if from_index is not None and since_ms is not None:
        raise InvalidInput("give at most one of from_index and since_ms")
    most = _count(body, "max", 1, MAX_REPLAY) or DEFAULT_REPLAY
    require(request, WRITE, "queue", queue)
    topic = request.match_info["topic"]
    await request.app[CATALOG].topic(topic, fresh=True)
    await request.app[CATALOG].queue(queue, fresh=True)
    stream = history_stream(topic)
    fwd = request.app.get(FORWARDER)
    if fwd is not None:  # read where the history is kept
        to = await fwd.target(request, stream)
        if to is not None:
            return await fwd.forward(request, to, stream)
    svc = request.app[STREAMS]
    if stream not in svc.names():
        raise NotFound(f"topic {topic!r} has kept no history (PATCH it with history: true)")
    sub = svc.subscribe(
        stream, Start(i=from_index, since=since_ms), Stops(most, None, None), "msgpack"
    )
    unpacker = msgpack.Unpacker(raw=False)
    read, enqueued = 0, 0
    next_index = from_index if from_index is not None else 0
    page: list[dict[str, Any]] = []
    chunks = svc.chunks(sub, True)
    try:
        async for chunk in chunks:
            unpacker.feed(chunk.data)
            for item in unpacker:
                page.append(item["entry"])
                next_index = int(item["index"]) + 1
                read += 1
                if len(page) >= _PAGE:
                    enqueued += await request.app[TOPICS].replay(topic, queue, page)
                    page = []
        if page:
            enqueued += await request.app[TOPICS].replay(topic, queue, page)
    finally:
        await chunks.aclose()
        svc.unsubscribe(sub)
    size = svc.info(stream).size
    if read == 0 and from_index is None:
        next_index = size if since_ms is not None else svc.info(stream).first_index
    return json_response(
        {"read": read, "enqueued": enqueued, "next_index": next_index, "done": next_index >= size}
    )
