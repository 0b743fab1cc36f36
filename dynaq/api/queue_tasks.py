"""Routes of the queue features beyond Dynamiq's: dead-letter sources, redrive and
purge tasks, and task progress (see :mod:`dynaq.services.queues.tasks`)."""

from __future__ import annotations

import re

from aiohttp import web

from dynaq.api.codec import json_response, read_body
from dynaq.api.keys import CATALOG, QUEUES
from dynaq.api.params import redrive_request
from dynaq.errors import InvalidInput

routes = web.RouteTableDef()

_TASK_ID = re.compile(r"[0-9a-f]{32}")


@routes.get("/v2/queues/{queue}/dead_letter_sources")
async def dead_letter_sources(request: web.Request) -> web.Response:
    """The queues whose redrive policy names this queue (SQS's ListDeadLetterSourceQueues)."""
    info = await request.app[CATALOG].queue(request.match_info["queue"])
    return json_response({"queues": await request.app[CATALOG].dead_letter_sources(info.name)})


@routes.post("/v2/queues/{queue}/redrive")
async def redrive(request: web.Request) -> web.Response:
    info = await request.app[CATALOG].queue(request.match_info["queue"])
    to_queue, max_per_s = redrive_request(await read_body(request) if request.can_read_body else {})
    task = await request.app[QUEUES].tasks.start_redrive(info, to_queue, max_per_s)
    return json_response(task, 202)


@routes.post("/v2/queues/{queue}/purge")
async def purge(request: web.Request) -> web.Response:
    info = await request.app[CATALOG].queue(request.match_info["queue"])
    return json_response(await request.app[QUEUES].tasks.start_purge(info), 202)


def _task_id(request: web.Request) -> str:
    task_id = request.match_info["task"]
    if not _TASK_ID.fullmatch(task_id):
        raise InvalidInput(f"malformed task id {task_id!r}: expected 32 hex digits")
    return task_id


@routes.get("/v2/tasks/{task}")
async def task(request: web.Request) -> web.Response:
    return json_response(await request.app[QUEUES].tasks.get(_task_id(request)))


@routes.post("/v2/queues/{queue}/tasks/{task}/cancel")
async def cancel_task(request: web.Request) -> web.Response:
    """Stop a running redrive of the queue (SQS's CancelMessageMoveTask)."""
    info = await request.app[CATALOG].queue(request.match_info["queue"])
    task_id = _task_id(request)
    return json_response(await request.app[QUEUES].tasks.cancel(task_id, info.name), 202)
