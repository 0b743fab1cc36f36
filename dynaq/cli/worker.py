"""``dynaq worker module:graph``: run a processing graph (:mod:`dynaq.processors`).

``module`` is imported from the current directory (then ``sys.path``); ``graph`` is a
:class:`~dynaq.processors.Graph` attribute of it, or a function returning one.
The node is ``--endpoint`` (or ``DYNAQ_ENDPOINT``), the token ``--token`` (or
``DYNAQ_TOKEN``). SIGTERM or SIGINT stops it gracefully: each processor finishes
the step it is in, releases its lease, and the process exits 0. Logs are JSON
lines on stderr, like a node's. ``DYNAQ_FAULT_POINT=<name>:<nth>`` arms a crash
point (:mod:`dynaq.processors.faults`), for crash tests.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from dynaq.cli.admin import DEFAULT_ENDPOINT, number
from dynaq.logs import setup_logging
from dynaq.stop_signals import ignore_signals_once_stopped, stop_on_signals

if TYPE_CHECKING:
    from dynaq.processors import Graph

# dynaq.processors (and the asyncio client) load only when a worker runs, not for
# every other command of the CLI.

log = logging.getLogger("dynaq.worker")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("worker", help="run a processing graph (module:graph)")
    p.add_argument("target", metavar="MODULE:GRAPH", help="e.g. examples.processors.pipeline:graph")
    p.add_argument(
        "--endpoint",
        default=None,
        help=f"node URL (default: $DYNAQ_ENDPOINT or {DEFAULT_ENDPOINT})",
    )
    p.add_argument("--token", default=None, help="bearer token (default: $DYNAQ_TOKEN)")
    p.add_argument("--lease-ttl", type=number, default=5.0, help="processor lease TTL, seconds")
    p.add_argument(
        "--report-interval",
        type=number,
        default=5.0,
        help="seconds between status reports to the node (GET /v2/processors); 0: none",
    )
    p.add_argument("--log-level", default=os.environ.get("DYNAQ_LOG_LEVEL", "info"))
    p.add_argument("--log-format", default=os.environ.get("DYNAQ_LOG_FORMAT", "json"))
    p.set_defaults(run=run)


def load_graph(target: str) -> Graph:
    """``module:attr`` → the graph (``attr`` may be a function returning one)."""
    from dynaq.processors import Graph

    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError(f"{target!r}: expected MODULE:GRAPH")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    obj = getattr(importlib.import_module(module_name), attr)
    if not isinstance(obj, Graph) and callable(obj):
        obj = obj()
    if not isinstance(obj, Graph):
        raise TypeError(f"{target} is a {type(obj).__name__}, not a dynaq.processors.Graph")
    return obj


async def serve(
    graph: Graph,
    endpoint: str,
    token: str | None,
    lease_ttl_s: float,
    report_interval_s: float = 5.0,
) -> None:
    """Run ``graph`` until SIGTERM or SIGINT, then stop gracefully; report each
    processor's status to the node every ``report_interval_s`` (0: never)."""
    from dynaq.client import AsyncClient
    from dynaq.processors import GraphRunner
    from dynaq.processors.report import StatusReporter

    loop = asyncio.get_running_loop()
    async with AsyncClient(endpoint, token=token) as client:
        runner = GraphRunner(graph, client, lease_ttl_s=lease_ttl_s)
        stop_on_signals(loop, runner.request_stop)
        await runner.start()
        log.info("worker started", extra={"graph": graph.name, "endpoint": endpoint})
        stopped = asyncio.Event()
        reporter = None
        if report_interval_s > 0:
            rep = StatusReporter(graph, runner, client, interval_s=report_interval_s)
            reporter = asyncio.create_task(rep.run(stopped), name="cues-status-reporter")
        try:
            await runner.wait()
        finally:
            try:
                stopped.set()
                if reporter is not None:
                    await reporter  # its last report says "stopped"
            finally:
                ignore_signals_once_stopped(loop)
        log.info("worker stopped", extra={"graph": graph.name, "status": runner.status()})


def run(args: argparse.Namespace) -> int:

    from dynaq.processors import faults

    setup_logging(args.log_level, args.log_format, f"worker-{os.getpid()}")
    try:
        faults.arm(os.environ.get("DYNAQ_FAULT_POINT"))
        graph = load_graph(args.target)
    except (ValueError, TypeError, ImportError, AttributeError) as exc:
        print(f"dynaq worker: {exc}", file=sys.stderr)
        return 2
    endpoint = args.endpoint or os.environ.get("DYNAQ_ENDPOINT") or DEFAULT_ENDPOINT
    token = args.token or os.environ.get("DYNAQ_TOKEN") or None
    asyncio.run(serve(graph, endpoint, token, args.lease_ttl, args.report_interval))
    return 0
