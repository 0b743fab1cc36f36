"""Typed application state shared by the handlers."""

from __future__ import annotations

from collections.abc import Callable

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
METRICS = web.AppKey("metrics", Telemetry)
STREAMS = web.AppKey("streams", StreamService)
PROCESSORS = web.AppKey("processors", ProcessorRegistry)
FORWARDER = web.AppKey("stream_forwarder", StreamForwarder)
"""Present in a ring: requests for a stream another node serves go there."""
