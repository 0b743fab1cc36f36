"""Builds the aiohttp application: routes, middleware, health."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from dynaq.api import batches as batch_routes
from dynaq.api import (
    bulk,
    console,
    internal,
    openapi,
    queue_tasks,
    stream_copies,
    topics_v2,
    transactions,
    v1,
    v2,
    worker_metrics,
)
from dynaq.api import processors as processor_routes
from dynaq.api import streams as stream_routes
from dynaq.api.auth import ACCESS
from dynaq.api.aws import (  # noqa: F401  (they register the actions)
    sqs_messages,
    sqs_move_tasks,
    sqs_queues,
)
from dynaq.api.aws.endpoint import endpoint as aws_endpoint
from dynaq.api.aws.sqs import SQS, SqsSettings
from dynaq.api.batches import BATCHES
from dynaq.api.codec import BODY_TIMEOUT, SERVER_OPTIONS, expect_continue, json_response
from dynaq.api.drain import IN_FLIGHT, RequestsInFlight
from dynaq.api.internal import PEER_VERIFIER
from dynaq.api.keys import (
    CATALOG,
    METRICS,
    NODE_STATE,
    PROCESSORS,
    QUEUES,
    STREAMS,
    TOPICS,
    VIEW,
    WORKER_OF,
    WorkerOf,
)
from dynaq.api.middleware import front_middleware, serve_metrics
from dynaq.api.openapi import OPENAPI, OPENAPI_PATH, SpecLimits, build_spec
from dynaq.core.access import AccessPolicy
from dynaq.core.membership import MembershipView
from dynaq.core.peer_auth import PeerVerifier
from dynaq.metrics import NullMetrics, Telemetry
from dynaq.services.batches import BatchService
from dynaq.services.catalog import Catalog
from dynaq.services.processors import ProcessorRegistry
from dynaq.services.queues import QueueService
from dynaq.services.topics import TopicService
from dynaq.streams import StreamService


async def health(request: web.Request) -> web.Response:
    """200 while the node serves; 503 while it starts or drains (so balancers skip it)."""
    state = request.app[NODE_STATE]()
    view = request.app[VIEW]
    body: dict[str, object] = {"status": state, "node": view.me.name, "members": len(view.members)}
    of = request.app.get(WORKER_OF)
    if of is not None:
        # A node of several workers is one node to its clients and in no ring of
        # machines: its name, one member; which worker answered, how many it runs
        # and how many of them are live in the ring of workers.
        body = {**body, "node": of.node, "members": 1, "worker": view.me.name}
        body["workers"], body["workers_live"] = of.workers, len(view.members)
    return json_response(body, 200 if state == "serving" else 503)


def _expecting(table: web.RouteTableDef) -> list[web.AbstractRouteDef]:
    """``table``'s routes, each answering ``Expect: 100-continue`` with
    :func:`~dynaq.api.codec.expect_continue` unless it names its own handler."""
    return [
        web.RouteDef(r.method, r.path, r.handler, {"expect_handler": expect_continue, **r.kwargs})
        if isinstance(r, web.RouteDef)
        else r
        for r in table
    ]


def build_app(
    *,
    catalog: Catalog,
    queues: QueueService,
    topics: TopicService,
    view: MembershipView,
    state: Callable[[], str],
    max_request_bytes: int,
    batches: BatchService,
    body_timeout_s: float = 30.0,
    access: AccessPolicy | None = None,
    peer_verifier: PeerVerifier | None = None,
    streams: StreamService | None = None,
    metrics: Telemetry | None = None,
    sqs: SqsSettings | None = None,
    processors: ProcessorRegistry | None = None,
    worker_scrape: worker_metrics.WorkerScrape | None = None,
    worker_of: WorkerOf | None = None,
) -> web.Application:
    """``access``: client tokens (``None``: every client is let in); ``peer_verifier``:
    the cluster's MAC check for ``/internal/`` (``None``: those routes refuse everything);
    ``metrics``: where request latencies go and what ``/metrics`` shows; ``sqs``: the
    SQS wire protocol on ``POST /`` (``None``: not served); ``processors``: where
    workers report processor status (``None``: not served); ``worker_of``: the node
    this process is one worker of (a node of several workers)."""
    app = web.Application(
        middlewares=[front_middleware],
        client_max_size=max_request_bytes,
        handler_args=SERVER_OPTIONS,
    )
    if access is not None:
        app[ACCESS] = access
    if peer_verifier is not None:
        app[PEER_VERIFIER] = peer_verifier
    app[BODY_TIMEOUT] = body_timeout_s
    app[IN_FLIGHT] = RequestsInFlight()
    app[METRICS] = metrics if metrics is not None else NullMetrics()
    app[CATALOG] = catalog
    app[QUEUES] = queues
    app[TOPICS] = topics
    app[VIEW] = view
    app[NODE_STATE] = state
    if worker_of is not None:
        app[WORKER_OF] = worker_of
    app[BATCHES] = batches
    if streams is not None:
        app[STREAMS] = streams
    if processors is not None:
        app[PROCESSORS] = processors
    app[OPENAPI] = build_spec(
        SpecLimits(
            max_batch=queues.limits.max_batch,
            max_message_bytes=queues.limits.max_message_bytes,
            max_request_bytes=max_request_bytes,
            max_batch_items=batches.max_items,
        )
    )
    app.router.add_get("/health", health)
    app.router.add_get(OPENAPI_PATH, openapi.serve)
    app.router.add_get("/metrics", serve_metrics)
    if worker_scrape is not None:  # several workers: /metrics shows them all
        worker_metrics.install(app, worker_scrape)
    app.router.add_routes(_expecting(internal.routes))
    app.router.add_routes(_expecting(v1.routes))
    app.router.add_routes(_expecting(v2.routes))
    app.router.add_routes(_expecting(transactions.routes))
    app.router.add_routes(_expecting(batch_routes.routes))
    app.router.add_routes(_expecting(bulk.routes))
    if streams is not None:
        app.router.add_routes(_expecting(stream_routes.routes))
        app.router.add_routes(_expecting(stream_copies.routes))
        app.router.add_routes(_expecting(topics_v2.routes))
    app.router.add_routes(_expecting(queue_tasks.routes))
    if processors is not None:
        app.router.add_routes(_expecting(processor_routes.routes))
    app.router.add_routes(_expecting(console.routes))
    if sqs is not None:
        app[SQS] = sqs
        app.router.add_post("/", aws_endpoint, expect_handler=expect_continue)
    return app
