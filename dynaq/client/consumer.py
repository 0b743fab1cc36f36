"""A consumer helper: ``async for message in client.consume("jobs", concurrency=8)``.

What it does, and guarantees:

* **Long polls every node.** A node serves receives from its own slice of
  the queue, so the consumer reads the ring and polls each member (with
  ``wait_time_s``), re-reading the ring when a member stops answering. A node
  that is down (or answers 5xx) is retried with backoff. An answer no retry can
  change -- the queue does not exist, the token is refused or lacks the grant, a
  setting is out of range -- stops the consumer, and iterating it (or
  :meth:`Consumer.run`) raises that error once it is closed.
* **At most ``concurrency`` messages in hand** -- yielded and not yet settled,
  plus those received and waiting to be yielded.
* **Heartbeats.** While a message is in hand its visibility is extended every
  third of ``visibility_timeout_s`` on the node that served it, so a handler
  may run far longer than the timeout without the message being served to
  anyone else. If that node dies, its in-flight state dies with it and the
  message may be served again elsewhere (at-least-once: a duplicate, never a
  loss); :attr:`Delivery.lost_lease` then says so.
* **Batched deletes.** :meth:`Delivery.ack` returns at once; acks are deleted
  in batches (per serving node, falling back to any endpoint) and retried until
  they succeed or the consumer closes. An ack that could not be delivered by
  then leaves its message to be served again: at-least-once.
* **Graceful stop.** :meth:`Consumer.stop` (or one of ``stop_signals``) stops
  receiving; messages received but not yet yielded are released at once
  (visibility 0); messages in hand are waited for (``drain_timeout_s``, with
  heartbeats) and their acks flushed before the block ends.

Settle every message (a :class:`Delivery`, defined in :mod:`dynaq.client.delivery`):
``message.ack()``, ``message.release()``, or use it as
``async with message:`` (ack on success, release on an exception). Or let
:meth:`Consumer.run` call a handler per message in up to ``concurrency`` tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol

from dynaq.client.delivery import Delivery
from dynaq.client.types import ReceivedMessage, RingMember
from dynaq.errors import DynaqError, Forbidden, InvalidInput, NotFound, Unauthorized

__all__ = ["STOP_SIGNALS", "Consumer", "ConsumerClient", "Delivery"]


class ConsumerClient(Protocol):
    """What a :class:`Consumer` needs of its client (an :class:`~dynaq.client.AsyncClient`)."""

    async def ring(self) -> list[RingMember]: ...

    async def receive(
        self,
        queue: str,
        max_messages: int = 10,
        visibility_timeout_s: float | None = None,
        addr: str | None = None,
        *,
        wait_time_s: float | None = None,
    ) -> list[ReceivedMessage]: ...

    async def delete(self, queue: str, ids: Sequence[int], addr: str | None = None) -> int: ...

    async def change_visibility(
        self, queue: str, ids: Sequence[int], visibility_timeout_s: float, addr: str | None = None
    ) -> list[int]: ...


log = logging.getLogger(__name__)

_PERMANENT = (NotFound, Unauthorized, Forbidden, InvalidInput)
"""Receive errors that no retry can change: they stop the consumer and are raised."""

_ACK_LINGER_S = 0.02
"""Acks wait this long for company before a delete is sent."""


class Consumer:
    """Consumes one queue through an :class:`~dynaq.client.AsyncClient` (see the module
    docstring). Use as ``async with client.consume(q) as c: async for m in c: ...``;
    iterating ``client.consume(q)`` directly also works and cleans up when the
    iteration ends."""

    def __init__(
        self,
        client: ConsumerClient,
        queue: str,
        *,
        concurrency: int = 10,
        visibility_timeout_s: float = 30.0,
        wait_time_s: float = 10.0,
        batch_size: int = 10,
        stop_signals: Sequence[int] = (),
        drain_timeout_s: float = 30.0,
        ring_refresh_s: float = 10.0,
    ) -> None:
        if concurrency < 1 or batch_size < 1:
            raise ValueError("concurrency and batch_size must be at least 1")
        if visibility_timeout_s < 1:
            raise ValueError("visibility_timeout_s must be at least 1 (heartbeats need room)")
        self.client = client
        self.queue = queue
        self.concurrency = concurrency
        self.visibility_timeout_s = visibility_timeout_s
        self.wait_time_s = wait_time_s
        self.batch_size = min(batch_size, concurrency)
        self.drain_timeout_s = drain_timeout_s
        self.ring_refresh_s = ring_refresh_s
        self._signals = tuple(stop_signals)
        self._slots = asyncio.Semaphore(concurrency)
        self._ready: asyncio.Queue[Delivery] = asyncio.Queue()
        self._held: dict[int, Delivery] = {}
        self._acks: dict[str, list[int]] = {}
        self._releases: dict[str, list[int]] = {}
        self._settled = asyncio.Event()
        self._stop = asyncio.Event()
        self._pollers: dict[str, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self._closed = False
        self._rng = random.Random()
        self.failure: DynaqError | None = None
        """The receive error that stopped the consumer (see the module docstring)."""
        self.acked = 0
        """Messages whose delete the node confirmed."""

    # lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        loop = asyncio.get_running_loop()
        for sig in self._signals:
            loop.add_signal_handler(sig, self.stop)
        self._tasks = [
            asyncio.create_task(self._watch_ring(), name=f"consume-{self.queue}-ring"),
            asyncio.create_task(self._heartbeats(), name=f"consume-{self.queue}-heartbeat"),
            asyncio.create_task(self._settler(), name=f"consume-{self.queue}-acks"),
        ]

    def stop(self) -> None:
        """Stop receiving; iteration ends once nothing received is left to yield."""
        self._stop.set()

    async def close(self) -> None:
        """Stop, release what was never yielded, wait for messages in hand (up to
        ``drain_timeout_s``), flush acks, and end every task. Safe to call twice."""
        if self._closed or not self._started:
            self._closed = True
            return
        self._closed = True
        self.stop()
        # A long poll in flight finishes (what it got is released below) rather
        # than being cut off: a cut-off answer would hide its messages for the
        # whole visibility timeout.
        polls = list(self._pollers.values())
        if polls:
            await asyncio.wait(polls, timeout=self.wait_time_s + 5)
        for task in polls:
            task.cancel()
        for task in polls:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._pollers.clear()
        while not self._ready.empty():
            self._ready.get_nowait().release()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_timeout_s
        while any(not d.settled for d in self._held.values()) and loop.time() < deadline:
            self._settled.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settled.wait(), deadline - loop.time())
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self._flush_settled(final=True)
        for sig in self._signals:
            loop.remove_signal_handler(sig)

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Delivery]:
        await self.start()
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            while not self._stop.is_set():
                getting = asyncio.ensure_future(self._ready.get())
                await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not getting.done():
                    getting.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await getting
                    continue
                delivery = getting.result()
                if self._stop.is_set():
                    delivery.release()  # never yielded: someone else may have it now
                    break
                yield delivery
        finally:
            stopping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stopping
            await self.close()
        if self.failure is not None:
            raise self.failure

    async def run(self, handler: Callable[[Delivery], Awaitable[None]]) -> None:
        """Call ``handler`` for each message in up to ``concurrency`` tasks until
        :meth:`stop` (or a stop signal): ack when it returns, release when it raises."""

        async def handle(d: Delivery) -> None:
            try:
                await handler(d)
            except Exception:
                log.exception("handler failed; message released", extra={"id": d.id})
                d.release()
            else:
                d.ack()

        failure: DynaqError | None = None
        async with self, asyncio.TaskGroup() as group:
            try:
                async for delivery in self:
                    group.create_task(handle(delivery))
            except DynaqError as exc:  # raised as itself, not inside an ExceptionGroup
                failure = exc
        if failure is not None:
            raise failure

    # receiving ---------------------------------------------------------------

    async def _watch_ring(self) -> None:
        """One poller per live member; members that left have their poller ended."""
        while not self._stop.is_set():
            try:
                members = [m.http for m in await self.client.ring()]
            except DynaqError as exc:
                log.warning("consumer: ring unavailable", extra={"error": str(exc)})
                members = list(self._pollers) or [""]
            for addr in set(self._pollers) - set(members):
                self._pollers.pop(addr).cancel()
            for addr in members:
                task = self._pollers.get(addr)
                if task is None or task.done():
                    self._pollers[addr] = asyncio.create_task(
                        self._poll(addr), name=f"consume-{self.queue}-{addr}"
                    )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.ring_refresh_s)

    async def _poll(self, addr: str) -> None:
        """Receive from one node (``""``: whichever endpoint the client uses)."""
        failures = 0
        while not self._stop.is_set():
            await self._slots.acquire()
            n = 1
            while n < self.batch_size and not self._slots.locked():
                await self._slots.acquire()
                n += 1
            try:
                got = await self.client.receive(
                    self.queue,
                    n,
                    self.visibility_timeout_s,
                    addr or None,
                    wait_time_s=self.wait_time_s,
                )
            except DynaqError as exc:
                for _ in range(n):
                    self._slots.release()
                if isinstance(exc, _PERMANENT):
                    log.warning("consumer: stopped", extra={"node": addr, "error": str(exc)})
                    if self.failure is None:
                        self.failure = exc
                    self.stop()
                    return
                failures += 1
                delay = self._rng.uniform(0, min(5.0, 0.1 * 2 ** min(failures, 6)))
                log.info("consumer: receive failed", extra={"node": addr, "error": str(exc)})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
                continue
            failures = 0
            for _ in range(n - len(got)):
                self._slots.release()
            for m in got:
                d = Delivery(self, m)
                self._held[m.id] = d
                if self._stop.is_set():
                    d.release()  # stopping: never to be yielded
                else:
                    self._ready.put_nowait(d)

    # settling ----------------------------------------------------------------

    def _settle(self, d: Delivery, *, ack: bool) -> None:
        pending = self._acks if ack else self._releases
        pending.setdefault(d.message.addr, []).append(d.id)
        self._held.pop(d.id, None)
        self._slots.release()
        self._settled.set()

    async def _settler(self) -> None:
        while True:
            await self._settled.wait()
            await asyncio.sleep(_ACK_LINGER_S)
            self._settled.clear()
            if not await self._flush_settled(final=False):
                await asyncio.sleep(self._rng.uniform(0.1, 0.5))
                self._settled.set()  # try again

    async def _flush_settled(self, *, final: bool) -> bool:
        """Send the pending deletes and releases; whether all went through."""
        ok = True
        for pending, ack in ((self._acks, True), (self._releases, False)):
            for addr in list(pending):
                ids = pending.pop(addr)
                try:
                    if ack:
                        await self._delete(addr, ids)
                    else:
                        await self.client.change_visibility(self.queue, ids, 0, addr or None)
                except DynaqError as exc:
                    if not ack:
                        continue  # the timeout brings them back anyway
                    ok = False
                    log.warning("consumer: delete failed", extra={"error": str(exc)})
                    if final:
                        continue  # served again later: at-least-once
                    pending.setdefault("", []).extend(ids)
        return ok

    async def _delete(self, addr: str, ids: list[int]) -> None:
        if addr:
            try:
                await self.client.delete(self.queue, ids, addr)
            except DynaqError:
                pass  # the serving node is gone: any node can delete
            else:
                self.acked += len(ids)
                return
        await self.client.delete(self.queue, ids)
        self.acked += len(ids)

    async def _heartbeats(self) -> None:
        """Extend what is in hand on the node that served it, every third of the timeout."""
        while True:
            await asyncio.sleep(self.visibility_timeout_s / 3)
            by_node: dict[str, list[Delivery]] = {}
            for d in self._held.values():
                if not d.settled:
                    by_node.setdefault(d.message.addr, []).append(d)
            for addr, ds in by_node.items():
                try:
                    changed = set(
                        await self.client.change_visibility(
                            self.queue, [d.id for d in ds], self.visibility_timeout_s, addr or None
                        )
                    )
                except DynaqError as exc:
                    log.info("consumer: heartbeat failed", extra={"node": addr, "error": str(exc)})
                    continue
                for d in ds:
                    if d.id not in changed:
                        d.lost_lease = True


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals a service usually stops on: ``consume(..., stop_signals=STOP_SIGNALS)``."""
