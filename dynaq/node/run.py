"""A node's process: run it until SIGTERM or SIGINT (or a lost writer slot), then
drain it (:meth:`~dynaq.node.root.Node.stop`) and exit."""

from __future__ import annotations

import asyncio

from dynaq.config import Config
from dynaq.node.root import Node
from dynaq.node.workers import WorkerRole
from dynaq.services.queues.crash_point import CrashPoint
from dynaq.stop_signals import ignore_signals_once_stopped, stop_on_signals


async def run_node(
    config: Config, worker: WorkerRole | None = None, crash_at: str | None = None
) -> None:
    """Run a node (or one ``worker`` of a node) until SIGTERM or SIGINT, then shut it
    down gracefully. ``crash_at`` (tests only) names a transaction or redrive step at
    which the process kills itself (:class:`~dynaq.services.queues.crash_point.CrashPoint`)."""
    node = Node(config, worker=worker)
    crash = CrashPoint(crash_at, None if worker is None else worker.parent or None)
    node.queues.transactions.crash = crash
    node.queues.tasks.crash = crash
    stop = node.stop_requested  # set by SIGTERM/SIGINT, or by losing the writer slot
    loop = asyncio.get_running_loop()
    stop_on_signals(loop, stop.set)
    try:
        await node.start()
        await stop.wait()
    finally:
        try:
            await node.stop()
        finally:
            ignore_signals_once_stopped(loop)
