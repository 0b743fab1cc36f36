"""Bulk-read routes for analytics clients (the Spark data source): ring, partitions, snapshot pages.

* ``GET /v2/status/ring`` → ``{"members": [{"name", "http", "from_id", "to_id"}]}``:
  the live ring and each member's slice of the id space (inclusive); a node of
  several workers is one member, at the node's address, with the whole id space.
* ``GET /v2/status/workers`` → ``{"node", "workers", "live": [{"name", "http"}]}``:
  the processes serving this node (a node of several workers: each live worker at
  its private loopback address).
* ``GET /v2/queues/:queue/partitions`` → ``{"node", "http", "partitions":
  [{"index", "from_id", "to_id"}]}``: the partitions this node serves the queue from
  (a node of several workers: every worker's).
* ``GET /v2/queues/:queue/snapshot?from_id=&to_id=&limit=&encoding=`` → one page
  (msgpack, or JSON with base64 buffers): ``encoding=columns`` (the default) or
  ``stored`` (the stored values, which the reader decodes), see
  :mod:`dynaq.services.snapshots`. A snapshot never locks or deletes.
"""

from __future__ import annotations

import base64

from aiohttp import web

from dynaq.api.codec import json_response, respond, wants_msgpack
from dynaq.api.keys import CATALOG, QUEUES, VIEW, WORKER_OF
from dynaq.api.params import query_int
from dynaq.core.ids import MAX_ID
from dynaq.core.keyspace import FULL_RANGE
from dynaq.errors import InvalidInput
from dynaq.services.catalog import QueueInfo
from dynaq.services.snapshots import MAX_PAGE

ENCODINGS = ("columns", "stored")

routes = web.RouteTableDef()


@routes.get("/v2/status/ring")
async def ring(request: web.Request) -> web.Response:
    view = request.app[VIEW]
    of = request.app.get(WORKER_OF)
    if of is not None:
        # A node of several workers is one member to its clients, at the node's
        # address: the workers' own are loopback-only (and plain HTTP).
        lo, hi = str(FULL_RANGE.bottom_id), str(FULL_RANGE.top_id)
        return json_response(
            {"members": [{"name": of.node, "http": of.http, "from_id": lo, "to_id": hi}]}
        )
    slices = view.slices()
    members = [
        {
            "name": m.name,
            "http": m.http_addr,
            # Decimal strings: JSON numbers lose precision past 2^53 in most clients.
            "from_id": str(slices[m.name].bottom_id),
            "to_id": str(slices[m.name].top_id),
        }
        for m in view.members
    ]
    return json_response({"members": members})


async def node_partition_count(request: web.Request, info: QueueInfo) -> int:
    """How many partitions this node serves ``info`` from: on a node of several
    workers, every worker's (the queue's ``partitions`` figure, v1 and v2)."""
    service = request.app[QUEUES]
    if request.app.get(WORKER_OF) is None:
        return service.partition_count(info)
    return len(await service.ring_partitions(info))


@routes.get("/v2/status/workers")
async def workers(request: web.Request) -> web.Response:
    """The processes that serve this node: on a node of several workers, each live
    worker and its private loopback address (for operators and test harnesses on
    the machine; clients use the node's own address); else the node itself."""
    view = request.app[VIEW]
    of = request.app.get(WORKER_OF)
    listed = [{"name": m.name, "http": m.http_addr} for m in view.members]
    if of is None:
        listed = [{"name": view.me.name, "http": view.me.http_addr}]
    node, count = (view.me.name, 1) if of is None else (of.node, of.workers)
    return json_response({"node": node, "workers": count, "live": listed})


@routes.get("/v2/queues/{queue}/partitions")
async def partitions(request: web.Request) -> web.Response:
    info = await request.app[CATALOG].queue(request.match_info["queue"])
    view = request.app[VIEW]
    service = request.app[QUEUES]
    of = request.app.get(WORKER_OF)
    if of is None:
        node, http = view.me.name, view.me.http_addr
        ranges = [(r.bottom_id, r.top_id) for r in service.partition_ranges(info)]
    else:  # a worker answers for its node: every worker's partitions
        node, http, ranges = of.node, of.http, await service.ring_partitions(info)
    return json_response(
        {
            "node": node,
            "http": http,
            "partitions": [
                {"index": i, "from_id": str(lo), "to_id": str(hi)}
                for i, (lo, hi) in enumerate(ranges)
            ],
        }
    )


@routes.get("/v2/queues/{queue}/snapshot")
async def snapshot(request: web.Request) -> web.Response:
    info = await request.app[CATALOG].queue(request.match_info["queue"])
    from_id = query_int(request.query, "from_id", 0, 0, MAX_ID)
    to_id = query_int(request.query, "to_id", MAX_ID, 0, MAX_ID)
    limit = query_int(request.query, "limit", 5000, 1, MAX_PAGE)
    encoding = request.query.get("encoding", "columns")
    if encoding not in ENCODINGS:
        raise InvalidInput(f"encoding must be one of {', '.join(ENCODINGS)}")
    stored = encoding == "stored"
    page = await request.app[QUEUES].snapshot(info, from_id, to_id, limit, stored=stored)
    binary = wants_msgpack(request)

    def buf(b: bytes) -> bytes | str:
        return b if binary else base64.b64encode(b).decode("ascii")

    body: dict[str, object] = {"count": page.count, "ids": buf(page.ids)}
    if stored:
        body["value_offsets"] = buf(page.value_offsets or b"")
        body["values"] = buf(page.values or b"")
    else:
        body["enqueued_ms"] = buf(page.enqueued_ms)
        body["body_offsets"] = buf(page.body_offsets)
        body["bodies"] = buf(page.bodies)
        body["attributes"] = page.attributes
    next_from = page.next_from_id
    body["next_from_id"] = next_from if binary or next_from is None else str(next_from)
    return respond(request, body, binary=binary)
