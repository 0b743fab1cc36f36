"""The web console: static HTML, JS and CSS under ``/ui``, served by every node.

The page talks to the node's own API from the browser (same origin: it works
behind HAProxy), with the token the user gives it when the node needs one.
The assets themselves hold no data, so they are served to anyone.
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from dynaq.errors import NotFound

routes = web.RouteTableDef()

ASSETS = {
    "index.html": "text/html",
    "console.js": "text/javascript",
    "console-streams.js": "text/javascript",
    "console-batches.js": "text/javascript",
    "console.css": "text/css",
}
# Read once at import (never on the event loop): a few kilobytes.
_FILES = {name: (resources.files(__package__) / "console" / name).read_bytes() for name in ASSETS}


@routes.get("/ui")
async def console_root(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("ui/")  # relative: keeps any prefix a proxy put in front


@routes.get("/ui/")
async def console_index(request: web.Request) -> web.Response:
    return _asset("index.html")


@routes.get("/ui/{asset}")
async def console_asset(request: web.Request) -> web.Response:
    return _asset(request.match_info["asset"])


def _asset(name: str) -> web.Response:
    if name not in ASSETS:
        raise NotFound(f"no console file {name!r}")
    return web.Response(
        body=_FILES[name],
        content_type=ASSETS[name],
        charset="utf-8",
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )
