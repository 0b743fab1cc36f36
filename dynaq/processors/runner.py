"""Running a graph: every processor of it against one endpoint, each in its own
supervised task, one place at a time (the backing stream's publisher lease).

Per processor, :class:`GraphRunner` loops: take the lease (waiting while another
worker holds it), start the task that renews it, run recovery, then step until
stopped or the lease is lost; on an interruption (the node unreachable, the
lease lost, a bug) it backs off and starts over from taking the lease, so
recovery always runs before stepping again. :meth:`GraphRunner.stop` lets each
processor finish the step it is in (one still waiting for input is abandoned:
it has written nothing), then releases the leases.

:meth:`GraphRunner.status` is what ``GET /v2/processors`` and ``python -m bench
processors`` read: one dict per processor (see :data:`STATUS_KEYS`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime
from typing import Any

from dynaq.client import AsyncClient, DynaqError
from dynaq.processors import records
from dynaq.processors.exactly_once import ExactlyOnce
from dynaq.processors.graph import Graph, Processor, QueueRef, Strategy, StreamRef
from dynaq.processors.io import (
    STREAM_NOT_FOUND,
    Backing,
    Lease,
    LeaseLost,
    Stopping,
    StreamInput,
    code_of,
)
from dynaq.processors.queue_once import QueueOnce
from dynaq.processors.relaxed import Relaxed
from dynaq.processors.steps import Reader, Stats

log = logging.getLogger(__name__)

BACKING_MAX_BYTES = 64 * 1024 * 1024
"""Default retention of a processor's backing stream (it needs only its last records)."""

STATUS_KEYS = (
    "name",
    "id",
    "kind",
    "strategy",
    "state",
    "inputs",
    "attempts",
    "handled_errors",
    "delivered",
    "last_delivery",
    "last_error",
    "backing",
)
"""The members of each :meth:`GraphRunner.status` entry: ``inputs`` maps each input to
its tailer position (the next index to take; queue inputs are absent), ``state`` is
one of ``starting``, ``waiting_for_lease``, ``recovering``, ``running``,
``interrupted``, ``stopped``; ``last_delivery`` is an ISO-8601 UTC time or None."""


class _Slot:
    """One processor's task and what it reports."""

    def __init__(self, proc: Processor) -> None:
        self.proc = proc
        self.stats = Stats()
        self.state = "starting"
        self.last_error: str | None = None
        self.engine: ExactlyOnce | Relaxed | QueueOnce | None = None
        self.task: asyncio.Task[None] | None = None


async def _cancel(task: asyncio.Task[Any] | None) -> None:
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


class GraphRunner:
    """Runs every processor of ``graph`` through ``client`` (one endpoint)."""

    def __init__(
        self,
        graph: Graph,
        client: AsyncClient,
        *,
        lease_ttl_s: float = 5.0,
        backoff_s: float = 0.2,
        backing_max_bytes: int = BACKING_MAX_BYTES,
    ) -> None:
        self.graph, self.client = graph, client
        self.lease_ttl_s, self.backoff_s = lease_ttl_s, backoff_s
        self.backing_max_bytes = backing_max_bytes
        self._stop = asyncio.Event()
        self._slots = {name: _Slot(p) for name, p in graph.processors.items()}

    async def declare(self) -> None:
        """Create the graph's streams and queues that are missing, and the hidden backing
        streams (an existing stream keeps its schema). Backing streams are (re)declared
        with their retention every time: recovery reads only back to the last snapshot,
        so older records are dropped a segment file at a time past
        ``backing_max_bytes`` (the newest finished file always stays)."""
        streams: dict[str, StreamRef] = {}
        for p in self.graph.processors.values():
            for e in p.endpoints():
                if isinstance(e, StreamRef):
                    streams.setdefault(e.name, e)
                elif e.name not in await self.client.list_queues():
                    with contextlib.suppress(DynaqError):
                        await self.client.create_queue(e.name)
            await self.client.declare_stream(
                p.backing, records.BACKING_SCHEMA, retention={"max_bytes": self.backing_max_bytes}
            )
        for ref in streams.values():
            try:
                await self.client.stream_size(ref.name)
            except DynaqError as exc:
                if code_of(exc) != STREAM_NOT_FOUND:
                    raise
                await self.client.declare_stream(ref.name, ref.schema, ref.order_key)

    async def start(self) -> None:
        """Declare what is missing, then start every processor's task."""
        await self.declare()
        for slot in self._slots.values():
            slot.task = asyncio.create_task(self._supervise(slot), name=f"cues-{slot.proc.id}")

    def request_stop(self) -> None:
        """Ask every processor to stop after its current step (signal-handler safe)."""
        self._stop.set()

    async def stop(self) -> None:
        """Stop after the current steps, and wait for it."""
        self._stop.set()
        await self.wait()

    async def wait(self) -> None:
        """Until every processor's task has ended (after a stop)."""
        tasks = [s.task for s in self._slots.values() if s.task is not None]
        try:
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            for t in tasks:
                await _cancel(t)
            raise

    def status(self) -> list[dict[str, Any]]:
        """One dict per processor (members: :data:`STATUS_KEYS`)."""
        out = []
        for slot in self._slots.values():
            p, st = slot.proc, slot.stats
            last = st.last_delivery_s
            out.append(
                {
                    "name": p.name,
                    "id": p.id,
                    "kind": str(p.kind),
                    "strategy": str(p.strategy),
                    "state": slot.state,
                    "inputs": dict(slot.engine.tailers) if slot.engine else {},
                    "attempts": st.attempts,
                    "handled_errors": st.handled_errors,
                    "delivered": st.delivered,
                    "last_delivery": None
                    if last is None
                    else datetime.fromtimestamp(last, UTC).isoformat(),
                    "last_error": slot.last_error,
                    "backing": p.backing,
                }
            )
        return out

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stop.wait()

    async def _supervise(self, slot: _Slot) -> None:
        p = slot.proc
        backoff = self.backoff_s
        inputs = {
            e.name: StreamInput(self.client, e.name) for e in p.inputs if isinstance(e, StreamRef)
        }
        reader = Reader(p, inputs)
        lease = Lease(self.client, p.backing, self.lease_ttl_s)
        while not self._stop.is_set():
            slot.state = "waiting_for_lease"
            try:
                if not await lease.acquire(self._stop):
                    break
            except DynaqError as exc:
                slot.state, slot.last_error = "interrupted", f"{exc.code}: {exc}"
                await self._pause(backoff)
                continue
            keeper = asyncio.create_task(lease.keep(), name=f"cues-lease-{p.id}")
            backing = Backing(self.client, p.backing, lease)
            engine = _engine(p)(p, self.client, backing, reader, slot.stats, self._stop)
            try:
                slot.state = "recovering"
                await engine.recover()
                slot.engine = engine
                slot.state = "running"
                log.info("processor running", extra={"processor": p.id, "tailers": engine.tailers})
                while not self._stop.is_set() and not lease.lost.is_set():
                    await engine.step()
                    backoff = self.backoff_s
            except Stopping:
                pass
            except LeaseLost as exc:
                slot.state, slot.last_error = "interrupted", str(exc)
                log.warning("processor lost its lease", extra={"processor": p.id})
            except Exception as exc:  # an unhandled error: interrupt, recover, retry
                slot.state, slot.last_error = "interrupted", f"{type(exc).__name__}: {exc}"
                log.exception("processor interrupted", extra={"processor": p.id})
                await self._pause(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                await _cancel(keeper)
                if self._stop.is_set():
                    await lease.release()
        slot.state = "stopped"


def _engine(p: Processor) -> type[ExactlyOnce | Relaxed | QueueOnce]:
    """Which steps run ``p``: exactly once over streams, over queues (transactions),
    or one of the relaxed strategies."""
    if p.strategy is not Strategy.EXACTLY_ONCE:
        return Relaxed
    return QueueOnce if all(isinstance(e, QueueRef) for e in p.endpoints()) else ExactlyOnce
