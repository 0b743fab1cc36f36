"""Routes of processor status (:mod:`dynaq.services.processors`): workers report,
operators read.

- ``PUT /v2/processors/{name}``: a worker's report of one processor (JSON).
- ``GET /v2/processors``: every processor's last report, with ``age_s``,
  ``alive`` and its total ``lag``.
- ``GET /v2/processors/{name}``, ``DELETE /v2/processors/{name}``.
"""

from __future__ import annotations

from aiohttp import web

from dynaq.api.codec import json_response, read_body
from dynaq.api.keys import PROCESSORS

routes = web.RouteTableDef()

MAX_REPORT_BYTES = 64 * 1024


@routes.get("/v2/processors")
async def list_processors(request: web.Request) -> web.Response:
    return json_response({"processors": await request.app[PROCESSORS].all()})


@routes.put("/v2/processors/{name}")
async def report(request: web.Request) -> web.Response:
    body = await read_body(request, MAX_REPORT_BYTES)
    return json_response(await request.app[PROCESSORS].report(request.match_info["name"], body))


@routes.get("/v2/processors/{name}")
async def describe(request: web.Request) -> web.Response:
    return json_response(await request.app[PROCESSORS].get(request.match_info["name"]))


@routes.delete("/v2/processors/{name}")
async def forget(request: web.Request) -> web.Response:
    await request.app[PROCESSORS].forget(request.match_info["name"])
    return json_response({"deleted": True})
