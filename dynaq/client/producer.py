"""A batching producer: many concurrent ``await producer.send(...)`` become few requests.

Messages sent within ``linger_s`` of each other (or up to ``MAX_BATCH`` at
once) go in one enqueue; each caller's ``send`` resolves with its message's id
once the batch is durable, or raises the batch's error. Retries follow the
client's rules: a batch whose request may have reached a node is not sent
again unless every message has a ``dedup_id``. Up to ``max_in_flight``
batches are in flight at once; order is kept within a batch, not between
concurrent batches.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Protocol

from dynaq.client.ops import MAX_BATCH
from dynaq.client.types import MessageLike, NewMessage


class ProducerClient(Protocol):
    """What a :class:`Producer` needs of its client (an :class:`~dynaq.client.AsyncClient`)."""

    async def enqueue(self, queue: str, messages: Sequence[MessageLike]) -> list[int]: ...

    async def publish(
        self, topic: str, messages: Sequence[MessageLike]
    ) -> dict[str, list[int]]: ...


class Producer:
    """Batches sends into ``queue`` or ``topic`` (exactly one). For a topic, ``send``
    resolves with ``{queue: id}`` of each subscribed queue's copy."""

    def __init__(
        self,
        client: ProducerClient,
        *,
        queue: str | None = None,
        topic: str | None = None,
        linger_s: float = 0.005,
        max_in_flight: int = 4,
    ) -> None:
        if (queue is None) == (topic is None):
            raise ValueError("give exactly one of queue= or topic=")
        self.client = client
        self.queue = queue
        self.topic = topic
        self.linger_s = linger_s
        self._pending: list[tuple[NewMessage, asyncio.Future[object]]] = []
        self._wake = asyncio.Event()
        self._workers: list[asyncio.Task[None]] = []
        self._max_in_flight = max_in_flight
        self._closing = False

    async def send(
        self,
        body: bytes | str,
        *,
        attributes: Mapping[str, str] | None = None,
        group: str | None = None,
        dedup_id: str | None = None,
    ) -> object:
        """Queue one message; its id (for a queue) once its batch is durable."""
        if self._closing:
            raise RuntimeError("the producer is closed")
        if not self._workers:
            self._workers = [
                asyncio.create_task(self._work(), name=f"producer-{i}")
                for i in range(self._max_in_flight)
            ]
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._pending.append((NewMessage(body, attributes, group, dedup_id), fut))
        self._wake.set()
        return await fut

    async def _work(self) -> None:
        while True:
            if not self._pending:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            if len(self._pending) < MAX_BATCH and not self._closing:
                await asyncio.sleep(self.linger_s)  # let company arrive
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            if not batch:
                continue
            messages = [m for m, _ in batch]
            try:
                if self.queue is not None:
                    results: list[object] = list(await self.client.enqueue(self.queue, messages))
                else:
                    assert self.topic is not None
                    per_queue = await self.client.publish(self.topic, messages)
                    results = [
                        {q: ids[i] for q, ids in per_queue.items()} for i in range(len(batch))
                    ]
            except Exception as exc:  # noqa: BLE001 -- handed to every sender, not swallowed
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for (_, fut), result in zip(batch, results, strict=True):
                if not fut.done():
                    fut.set_result(result)

    async def close(self) -> None:
        """Send what is pending, then end the workers."""
        self._closing = True
        self._wake.set()
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers.clear()

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
