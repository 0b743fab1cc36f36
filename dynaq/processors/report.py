"""Reports of a running graph to its node (``PUT /v2/processors/{name}``), so
``GET /v2/processors``, ``dynaq`` operators and statsd see each processor's tailer
positions, lag, attempts and handled errors.

Best effort by design: a report that fails is logged and the next one goes out an
interval later; processing never waits for a report. The lag of a stream input
is its size minus the tailer's position, read when the report is made.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from datetime import datetime
from typing import Any

from dynaq.client import AsyncClient, DynaqError
from dynaq.processors.graph import Graph, QueueRef
from dynaq.processors.runner import GraphRunner

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 5.0


def worker_id() -> str:
    """``<host>/<pid>``: which worker a report came from."""
    return f"{socket.gethostname()}/{os.getpid()}"


class StatusReporter:
    """Sends every processor's status every ``interval_s`` (see the module)."""

    def __init__(
        self,
        graph: Graph,
        runner: GraphRunner,
        client: AsyncClient,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        worker: str | None = None,
    ) -> None:
        self.graph, self.runner, self.client = graph, runner, client
        self.interval_s = interval_s
        self.worker = worker or worker_id()
        self.sent = 0
        self.failed = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Report every interval until ``stop`` is set, then once more (the final
        states, ``stopped`` once the runner has stopped)."""
        while not stop.is_set():
            await self.report_once()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval_s):
                    await stop.wait()
        await self.report_once()

    async def report_once(self) -> None:
        for status in self.runner.status():
            try:
                body = await self._body(status)
                await self.client.report_processor(status["id"], body)
                self.sent += 1
            except (TimeoutError, DynaqError, OSError) as exc:
                self.failed += 1
                log.warning(
                    "processor status not reported",
                    extra={"processor": status["id"], "error": str(exc)},
                )

    async def _body(self, status: dict[str, Any]) -> dict[str, Any]:
        proc = self.graph.processors[status["name"]]
        inputs: list[dict[str, Any]] = []
        for e in proc.inputs:
            if isinstance(e, QueueRef):
                inputs.append({"name": e.name, "kind": "queue", "position": None, "lag": None})
                continue
            position = status["inputs"].get(e.name)
            lag = None
            if position is not None:
                lag = max(0, await self.client.stream_size(e.name) - int(position))
            inputs.append({"name": e.name, "kind": "stream", "position": position, "lag": lag})
        last = status["last_delivery"]
        body: dict[str, Any] = {
            "graph": self.graph.name,
            "kind": status["kind"],
            "strategy": status["strategy"],
            "state": status["state"],
            "worker": self.worker,
            "inputs": inputs,
            "outputs": [o.name for o in proc.outputs],
            "attempts": status["attempts"],
            "delivered": status["delivered"],
            "handled_errors": status["handled_errors"],
            "last_delivery_ms": None
            if last is None
            else int(datetime.fromisoformat(last).timestamp() * 1000),
            "interval_s": self.interval_s,
        }
        if status["last_error"]:
            body["error"] = str(status["last_error"])[:1024]
        return body
