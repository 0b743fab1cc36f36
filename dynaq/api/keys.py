"""Typed application state shared by the handlers."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from aiohttp import web

from dynaq.api.stream_proxy import StreamForwarder
from dynaq.core.membership import MembershipView
from dynaq.metrics import Telemetry
from dynaq.services.catalog import Catalog
from dynaq.services.processors import ProcessorRegistry
from dynaq.services.queues import QueueService
from dynaq.services.topics import TopicService
from dynaq.streams import StreamService

CATALOG = web.AppKey("catalog", Catalog)
QUEUES = web.AppKey("queues", QueueService)
TOPICS = web.AppKey("topics", TopicService)
VIEW = web.AppKey("view", MembershipView)
NODE_STATE: web.AppKey[Callable[[], str]] = web.AppKey("node_state")


class WorkerOf(NamedTuple):
    """The node this process is one worker of, how many workers it runs, and the
    address clients reach the node at (``host:port``; the workers' own addresses
    are loopback-only, for each other)."""

    node: str
    workers: int
    http: str = ""


WORKER_OF = web.AppKey("worker_of", WorkerOf)
"""Set only on a worker of a node of several."""
METRICS = web.AppKey("metrics", Telemetry)
STREAMS = web.AppKey("streams", StreamService)
PROCESSORS = web.AppKey("processors", ProcessorRegistry)
FORWARDER = web.AppKey("stream_forwarder", StreamForwarder)
"""Present in a ring: requests for a stream another node serves go there."""
