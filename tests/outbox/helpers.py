"""Helpers shared by the outbox tests (no tests here): writers, consumers, recorders."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dynaq.config import OutboxConfig
from dynaq.core.messages import NewMessage
from dynaq.errors import StorageUnavailable
from dynaq.metrics import GaugeProvider
from dynaq.outbox.events import Event
from dynaq.outbox.schema import init_db, stash
from dynaq.services.queues import QueueService
from dynaq.services.topics import TopicService

if TYPE_CHECKING:
    from asyncpg import Pool


@contextlib.asynccontextmanager
async def outbox_pool(dsn: str, *, min_size: int, max_size: int) -> AsyncIterator[Pool]:
    """A connection pool on a database whose outbox table exists; closed on exit."""
    import asyncpg

    pool = await asyncpg.create_pool(dsn, min_size=min_size, max_size=max_size)
    try:
        async with pool.acquire() as conn:
            await init_db(conn)
        yield pool
    finally:
        await pool.close()


def fast_config(dsn: str, **overrides: Any) -> OutboxConfig:
    """goharvest's defaults, with short back-offs so tests do not wait on them."""
    values: dict[str, Any] = {
        "dsn": dsn,
        "io_error_backoff_ms": 100,
        "queue_timeout_s": 10.0,
        "metrics_interval_s": 1.0,
    }
    values.update(overrides)
    return OutboxConfig(**values)


class RecordingMetrics:
    """Counts what the relay reports (the statsd reporter is tested elsewhere)."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = {}
        self.gauges: dict[str, float] = {}

    def incr(self, name: str, count: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + count

    def gauge(self, name: str, value: float) -> None:
        self.gauges[name] = value

    def add_gauge_provider(self, provider: GaugeProvider) -> None:
        pass

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


@dataclass
class EventLog:
    """Every relay event with the monotonic time it arrived."""

    events: list[tuple[float, Event]] = field(default_factory=list)

    def __call__(self, event: Event) -> None:
        self.events.append((time.monotonic(), event))

    def of(self, kind: type) -> list[tuple[float, Event]]:
        return [(t, e) for t, e in self.events if isinstance(e, kind)]


class FlakyPublisher:
    """The real topic service, with injected failures.

    ``fail_before``: the publish raises without writing (a refused write).
    ``fail_after``: the publish is written, then raises (a lost acknowledgement).
    """

    def __init__(
        self, topics: TopicService, fail_before: float, fail_after: float, seed: int = 7
    ) -> None:
        self._topics = topics
        self._before = fail_before
        self._after = fail_after
        self._rng = random.Random(seed)
        self.failures = 0

    async def publish(
        self,
        topic: str,
        messages: Sequence[NewMessage],
        *,
        message_ids: Sequence[str] | None = None,
    ) -> dict[str, list[int]]:
        if self._rng.random() < self._before:
            self.failures += 1
            raise StorageUnavailable("injected: publish refused")
        out = await self._topics.publish(topic, messages, message_ids=message_ids)
        if self._rng.random() < self._after:
            self.failures += 1
            raise StorageUnavailable("injected: acknowledgement lost")
        return out


async def write_keyed_rows(
    pool: Any, topic: str, keys: int, per_key: int, table: str = "outbox"
) -> None:
    """One writer task per key, each committing its rows one transaction at a time (causal order)."""

    async def writer(k: int) -> None:
        for seq in range(per_key):
            async with pool.acquire() as conn, conn.transaction():
                await stash(
                    conn, topic, f"k{k}", f"k{k}:{seq}".encode(), {"seq": str(seq)}, table=table
                )

    await asyncio.gather(*(writer(k) for k in range(keys)))


async def consume(
    queues: QueueService,
    queue: str,
    expected: int,
    *,
    consumers: int = 4,
    timeout_s: float = 90.0,
    on_batch: Callable[[], None] | None = None,
) -> dict[str, list[int]]:
    """Receive and delete concurrently until ``expected`` messages or the timeout.

    Returns, per key, the sequence numbers in the order they were received.
    """
    seen: dict[str, list[int]] = {}
    total = 0
    deadline = time.monotonic() + timeout_s
    done = asyncio.Event()

    async def consumer() -> None:
        nonlocal total
        while not done.is_set() and time.monotonic() < deadline:
            msgs = await queues.receive(queue, 10)
            if not msgs:
                await asyncio.sleep(0.01)
                continue
            for m in msgs:
                key, seq = m.body.decode().split(":")
                assert m.attributes is not None
                assert m.attributes["outbox_key"] == key and m.group == key
                seen.setdefault(key, []).append(int(seq))
            total += len(msgs)
            await asyncio.sleep(0)
            await queues.delete(queue, [m.id for m in msgs])
            if on_batch is not None:
                on_batch()
            if total >= expected:
                done.set()

    await asyncio.gather(*(consumer() for _ in range(consumers)))
    return seen


async def linger_for_duplicates(queues: QueueService, queue: str, seconds: float) -> list[str]:
    """After everything arrived, keep receiving a while: anything more is a duplicate."""
    extra: list[str] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        msgs = await queues.receive(queue, 10)
        extra.extend(m.body.decode() for m in msgs)
        if msgs:
            await queues.delete(queue, [m.id for m in msgs])
        await asyncio.sleep(0.05)
    return extra
