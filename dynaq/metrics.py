"""Metrics: statsd (aggregated in process, flushed on an interval) and Prometheus.

Services call :meth:`Metrics.incr` / :meth:`Metrics.gauge` on every request;
those only touch a dict. A background task sends everything accumulated to
statsd every ``flush_interval_s`` in one pipelined burst of UDP packets (like
Dynamiq's ``flushinterval``), so metrics never put a syscall on the hot path.
Gauges that are cheaper to compute on demand (queue depths) come from
providers called at flush (or scrape) time.

Metric names follow the contract: ``<prefix><queue>.sent.count`` etc.
:class:`PrometheusMetrics` (:mod:`dynaq.prometheus`) serves the same figures
at ``/metrics`` with labels, plus latency histograms (:meth:`Metrics.observe`:
per route, store commits), which statsd does not get.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Protocol

import statsd

from dynaq.clock import Clock
from dynaq.tasks import cancel_and_wait, every

log = logging.getLogger(__name__)

GaugeProvider = Callable[[], Mapping[str, float]]


class Metrics(Protocol):
    """Where services report what they did."""

    def incr(self, name: str, count: int = 1) -> None: ...

    def gauge(self, name: str, value: float) -> None: ...

    def add_gauge_provider(self, provider: GaugeProvider) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Telemetry(Metrics, Protocol):
    """What the node and its HTTP layer also need: latencies and the ``/metrics`` text.
    (Services report through :class:`Metrics` alone.)"""

    def observe(self, name: str, seconds: float, labels: Mapping[str, str] | None = None) -> None:
        """A latency (a histogram in Prometheus; statsd does not get them)."""

    def exposition(self) -> bytes | None:
        """The Prometheus text format of every figure (``None``: Prometheus is off)."""


class NullMetrics:
    """Metrics turned off (``stats.type = "none"``)."""

    def incr(self, name: str, count: int = 1) -> None:
        pass

    def gauge(self, name: str, value: float) -> None:
        pass

    def add_gauge_provider(self, provider: GaugeProvider) -> None:
        pass

    def observe(self, name: str, seconds: float, labels: Mapping[str, str] | None = None) -> None:
        pass

    def exposition(self) -> bytes | None:
        return None

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


class StatsdMetrics:
    """Aggregating statsd reporter."""

    def __init__(self, address: str, prefix: str, flush_interval_s: float, clock: Clock) -> None:
        host, _, port = address.rpartition(":")
        # statsd's client adds its own "." after the prefix; ours carries it.
        self._client = statsd.StatsClient(host or "127.0.0.1", int(port), prefix=None)
        self._prefix = prefix
        self._interval = flush_interval_s
        self._clock = clock
        self._counters: dict[str, int] = {}
        self._gauges: dict[str, float] = {}
        self._providers: list[GaugeProvider] = []
        self._task: asyncio.Task[None] | None = None

    def incr(self, name: str, count: int = 1) -> None:
        self._counters[name] = self._counters.get(name, 0) + count

    def gauge(self, name: str, value: float) -> None:
        self._gauges[name] = value

    def add_gauge_provider(self, provider: GaugeProvider) -> None:
        self._providers.append(provider)

    def observe(self, name: str, seconds: float, labels: Mapping[str, str] | None = None) -> None:
        pass  # a timer per request would be a packet per request: Prometheus has them

    def exposition(self) -> bytes | None:
        return None

    def flush(self) -> None:
        """Send everything accumulated since the last flush."""
        counters, self._counters = self._counters, {}
        gauges, self._gauges = self._gauges, {}
        for provider in self._providers:
            try:
                gauges.update(provider())
            except Exception:  # a metrics bug must never take the node down
                log.exception("gauge provider failed")
        if not counters and not gauges:
            return
        pipe = self._client.pipeline()
        for name, n in counters.items():
            pipe.incr(self._prefix + name, n)
        for name, value in gauges.items():
            pipe.gauge(self._prefix + name, value)
        try:
            pipe.send()
        except OSError as exc:
            log.warning("statsd send failed", extra={"error": str(exc)})

    async def _flush_round(self) -> None:
        self.flush()

    async def start(self) -> None:
        if self._task is None:
            flushes = every(
                self._interval, self._flush_round, clock=self._clock, what="statsd flush"
            )
            self._task = asyncio.create_task(flushes, name="statsd-flush")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        self.flush()


class FanoutMetrics:
    """Reports to several :class:`Telemetry` at once (statsd and Prometheus)."""

    def __init__(self, *targets: Telemetry) -> None:
        self._targets = targets

    def incr(self, name: str, count: int = 1) -> None:
        for t in self._targets:
            t.incr(name, count)

    def gauge(self, name: str, value: float) -> None:
        for t in self._targets:
            t.gauge(name, value)

    def add_gauge_provider(self, provider: GaugeProvider) -> None:
        for t in self._targets:
            t.add_gauge_provider(provider)

    def observe(self, name: str, seconds: float, labels: Mapping[str, str] | None = None) -> None:
        for t in self._targets:
            t.observe(name, seconds, labels)

    def exposition(self) -> bytes | None:
        for t in self._targets:
            text = t.exposition()
            if text is not None:
                return text
        return None

    async def start(self) -> None:
        for t in self._targets:
            await t.start()

    async def stop(self) -> None:
        for t in self._targets:
            await t.stop()
