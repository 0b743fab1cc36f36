"""The HTTP floor of the queue bench: a bare aiohttp server answering dynaq's v1 PUT.

``python -m bench._floor_server PORT`` serves ``PUT /v1/queues/{queue}/message``
with the shape dynaq answers (a decimal id as ``text/plain``), reading the
body and doing nothing else: no middleware, no store, no fsync. Its round
trip, measured by the same client code as dynaq's, is what HTTP through
aiohttp costs on this machine right now; dynaq's single enqueue cannot beat
it plus one durable commit (``bench.queue`` reports both, same run). It runs on
the event loop a dynaq node runs on by default (uvloop), so the floor is the
same HTTP stack minus dynaq.
"""

from __future__ import annotations

import sys

import uvloop
from aiohttp import web


async def _enqueue(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(text="1", content_type="text/plain")


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"status": "serving"})


def app() -> web.Application:
    """The floor server's application (one route and ``/health``)."""
    a = web.Application()
    a.router.add_put("/v1/queues/{queue}/message", _enqueue)
    a.router.add_get("/health", _health)
    return a


def main(argv: list[str]) -> None:
    web.run_app(
        app(),
        host="127.0.0.1",
        port=int(argv[0]),
        print=None,
        access_log=None,
        loop=uvloop.new_event_loop(),
    )


if __name__ == "__main__":
    main(sys.argv[1:])
