"""Prometheus exposition of dynaq's figures (``GET /metrics``), with prometheus-client.

The statsd names map to labelled families, so one query covers every queue:

=====================================  =============================================
statsd name                            Prometheus
=====================================  =============================================
``<queue>.sent.count`` (counter)       ``dynaq_queue_sent_total{queue}``
``<queue>.received.count``             ``dynaq_queue_received_total{queue}``
``<queue>.deleted.count``              ``dynaq_queue_deleted_total{queue}``
``<queue>.<event>.count``              ``dynaq_queue_<event>_total{queue}``: delayed,
                                       redriven, purged, expired, dead_lettered
``<queue>.depth.count`` (gauge)        ``dynaq_queue_depth{queue}``
``<queue>.fill.count``                 ``dynaq_queue_fill_percent{queue}``
``<queue>.approximate_depth.count``    ``dynaq_queue_approximate_depth{queue}``
``<queue>.slice.<figure>`` (gauge)     ``dynaq_queue_slice_<figure>{queue}``: visible,
                                       in_flight, delayed, oldest_age_s
``processors.<name>.<figure>.count``   ``dynaq_processor_<figure>{processor}``: lag,
                                       attempts, delivered, handled_errors
``batches.<mode>.opened.count``        ``dynaq_batches_opened_total{mode}``
any other ``a.b.count``                ``dynaq_a_b_total`` (counter) / ``dynaq_a_b`` (gauge)
=====================================  =============================================

Every figure of one queue (or processor) is a label value of one family, never
part of a family's name: queues ``a-b``, ``a.b`` and ``a_b`` are three series,
and a queue named ``batches``, ``batches.exact``, ``outbox.x`` or ``a.sent`` is
a queue like any other (:func:`family` reads a name from its end). Every sample
of a family has the same label names.

Gauges are of what exists now: the providers' (depth, slice) are computed at each
scrape for the queues that exist, and a pushed one (fill) goes when its queue is
deleted (no longer in ``dynaq_queue_depth``). Counters stay until the node stops.

Histograms (seconds): ``dynaq_http_request_duration_seconds{method, route,
status}`` -- ``route`` is the route's template (``/v2/queues/{queue}/messages``),
never the raw path, so the label set stays small; a long poll's wait is part
of its receive's duration -- and ``dynaq_store_commit_duration_seconds`` (one
group commit of the embedded store, fsync included).

Counters and gauges are kept in dicts (an ``incr`` costs what the statsd
side's does) and turned into samples only when scraped; gauge providers
(queue depths) are called then too.

A node of several worker processes (``http.workers``) answers a scrape with
every worker's figures: the worker the connection reached gathers the others'
own text (:mod:`dynaq.api.worker_metrics`) and :func:`merge_workers` joins them,
each sample labelled ``worker="<member name>"``: each worker's figures are its
own (its counters and latencies, its slice, the last processor report it
took). The one family every worker reads alike from the store they share,
each queue's depth (:data:`NODE_WIDE`), is shown once for the node, unlabelled.
``dynaq_worker_scrape_ok{worker}`` says which workers are in the scrape.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from dynaq.metrics import GaugeProvider

log = logging.getLogger(__name__)

LATENCY_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0,
)  # fmt: skip
HISTOGRAMS = {
    "http_request_duration_seconds": (
        "HTTP request latency by route template, method and status",
        ("method", "route", "status"),
    ),
    "store_commit_duration_seconds": ("One store commit (group commit, fsync included)", ()),
}
QUEUE_COUNTERS = frozenset(
    {"sent", "received", "deleted", "delayed", "redriven", "purged", "expired", "dead_lettered"}
)
QUEUE_GAUGES = {"depth": "depth", "fill": "fill_percent", "approximate_depth": "approximate_depth"}
SLICE_GAUGES = frozenset({"visible", "in_flight", "delayed", "oldest_age_s"})
PROCESSOR_GAUGES = frozenset({"lag", "attempts", "delivered", "handled_errors"})
BATCH_MODES = frozenset({"exact", "estimated"})
NON_QUEUE_EVENTS = frozenset(
    {"opened", "completed", "reaped", "retried", "dropped", "added", "acked"}  # batches.*
    | {"published", "publish_failed", "parked", "acquired", "refreshed", "revoked", "fenced"}
)
"""The last word of every counter that is not a queue's (batches, the outbox relay):
disjoint from :data:`QUEUE_COUNTERS`, which is what keeps :func:`family` unambiguous
(``tests/api/test_metrics_probe_fixes.py`` checks it)."""
LIVE_QUEUES = "dynaq_queue_depth"
"""The family whose provider reports every existing queue at every scrape (the
depth gauges, :meth:`~dynaq.services.queues.state.QueueStates.gauges`): its
``queue`` labels are the queues that exist."""
_BAD = re.compile(r"[^a-zA-Z0-9_]")
_CACHE_MAX = 10_000
"""Most names (or label sets) remembered: queue names come and go."""

Labels = tuple[tuple[str, str], ...]
Key = tuple[str, Labels]


def family(name: str, counter: bool) -> Key:
    """The Prometheus family and labels a statsd-style ``name`` stands for.

    Decided from the end of the name alone: a queue's figure is its last word
    (``<queue>.<figure>.count``, ``<queue>.slice.<figure>``), a processor's too
    (``processors.<name>.<figure>.count``), and those vocabularies are disjoint
    from each other and from the other counters' (:data:`NON_QUEUE_EVENTS`), so
    whatever precedes the figure is the queue's (or processor's) name, whole:
    no legal name (``batches``, ``batches.exact``, ``outbox.x``, ``a.sent``, ...)
    can move a figure to another family or out of its label. Only names no queue
    or processor can produce reach the fixed ``batches`` branch or the unlabelled
    fallback (``dynaq_`` + the name, ``.`` as ``_``)."""
    counted = name.endswith(".count")
    base = name.removesuffix(".count")
    owner, _, what = base.rpartition(".")
    if owner and counted:  # ``<owner>.<what>.count``
        if counter and what in QUEUE_COUNTERS:
            return f"dynaq_queue_{what}", (("queue", owner),)
        if not counter and what in QUEUE_GAUGES:
            return f"dynaq_queue_{QUEUE_GAUGES[what]}", (("queue", owner),)
        if not counter and what in PROCESSOR_GAUGES and owner.startswith("processors."):
            return f"dynaq_processor_{what}", (("processor", owner.removeprefix("processors.")),)
    elif owner and not counter and what in SLICE_GAUGES:  # ``<queue>.slice.<what>``
        queue, _, kind = owner.rpartition(".")
        if queue and kind == "slice":
            return f"dynaq_queue_slice_{what}", (("queue", queue),)
    parts = base.split(".")
    if counter and len(parts) == 3 and parts[0] == "batches" and parts[1] in BATCH_MODES:
        return f"dynaq_batches_{parts[2]}", (("mode", parts[1]),)
    return "dynaq_" + _BAD.sub("_", base), ()


class _Figures(Collector):
    """Turns the counter and gauge dicts into samples at scrape time."""

    def __init__(self, owner: PrometheusMetrics) -> None:
        self._owner = owner

    def collect(self) -> Iterator[Metric]:
        counters, gauges = self._owner.snapshot()
        yield from _families(counters, CounterMetricFamily)
        yield from _families(gauges, GaugeMetricFamily)


def _families(
    values: Mapping[Key, float], kind: type[CounterMetricFamily] | type[GaugeMetricFamily]
) -> Iterator[Metric]:
    """One family per name, every sample of it with the same label names (and so one
    series per label set: ``values`` has one value per key). A sample whose label
    names differ from its family's would be a :func:`family` bug: it is logged and
    left out rather than served as a second, unqueryable kind of series."""
    by_name: dict[str, list[tuple[Labels, float]]] = {}
    for (name, labels), value in values.items():
        by_name.setdefault(name, []).append((labels, value))
    for name, samples in sorted(by_name.items()):
        samples.sort()
        label_names = [k for k, _ in samples[0][0]]
        fam = kind(name, f"dynaq {name.removeprefix('dynaq_')}", labels=label_names)
        for labels, value in samples:
            if [k for k, _ in labels] != label_names:
                log.warning("metric %s%s left out: not %s's labels", name, labels, label_names)
                continue
            fam.add_metric([v for _, v in labels], value)
        yield fam


class PrometheusMetrics:
    """The :class:`~dynaq.metrics.Metrics` that ``GET /metrics`` exposes."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._counters: dict[Key, float] = {}
        self._gauges: dict[Key, float] = {}
        self._providers: list[GaugeProvider] = []
        self._histograms = {
            name: Histogram(
                f"dynaq_{name}", text, labels, registry=self.registry, buckets=LATENCY_BUCKETS_S
            )
            for name, (text, labels) in HISTOGRAMS.items()
        }
        self.registry.register(_Figures(self))
        self._counter_keys: dict[str, Key] = {}
        self._gauge_keys: dict[str, Key] = {}
        self._children: dict[tuple[str, tuple[tuple[str, str], ...]], Histogram] = {}

    def incr(self, name: str, count: int = 1) -> None:
        # Every enqueue counts: map its name once, not on each call.
        key = self._counter_keys.get(name)
        if key is None:
            if len(self._counter_keys) >= _CACHE_MAX:
                self._counter_keys.clear()
            key = self._counter_keys[name] = family(name, counter=True)
        self._counters[key] = self._counters.get(key, 0) + count

    def gauge(self, name: str, value: float) -> None:
        # Every receive sets its queue's fill: map its name once, not on each call.
        key = self._gauge_keys.get(name)
        if key is None:
            if len(self._gauge_keys) >= _CACHE_MAX:
                self._gauge_keys.clear()
            key = self._gauge_keys[name] = family(name, counter=False)
        self._gauges[key] = value

    def add_gauge_provider(self, provider: GaugeProvider) -> None:
        self._providers.append(provider)

    def observe(self, name: str, seconds: float, labels: Mapping[str, str] | None = None) -> None:
        hist = self._histograms.get(name)
        if hist is None:
            raise ValueError(f"no histogram {name!r}; known: {sorted(self._histograms)}")
        if not labels:
            hist.observe(seconds)
            return
        # Every request is timed: find its labelled child once (``labels()``
        # validates and locks on each call). Called from the store's writer
        # thread too; a race only makes ``labels()`` return the same child twice.
        key = (name, tuple(labels.items()))
        child = self._children.get(key)
        if child is None:
            if len(self._children) >= _CACHE_MAX:
                self._children.clear()
            child = self._children[key] = hist.labels(**labels)
        child.observe(seconds)

    def snapshot(self) -> tuple[dict[Key, float], dict[Key, float]]:
        """The counters, and the gauges: the providers' as they are now, and the last
        value of each pushed one (:meth:`gauge`) of a queue that still exists."""
        provided: dict[Key, float] = {}
        complete = True
        for provider in self._providers:
            try:
                for name, value in provider().items():
                    provided[family(name, counter=False)] = value
            except Exception:  # a metrics bug must never fail a scrape
                complete = False
                log.exception("gauge provider failed")
        if complete and self._providers:
            self._forget_deleted_queues(provided)
        return dict(self._counters), {**self._gauges, **provided}

    def _forget_deleted_queues(self, provided: Mapping[Key, float]) -> None:
        # A pushed gauge (a receive's fill) is a last value that nothing would ever
        # update again once its queue is deleted: drop it with the queue, as the
        # providers' (depth, slice) drop theirs. Counters stay: they are totals since
        # the node started, and one dropped on a wrong guess would lose increments.
        live = {labels[0][1] for name, labels in provided if name == LIVE_QUEUES and labels}
        gone = [
            key
            for key in self._gauges
            if key[1] and key[1][0][0] == "queue" and key[1][0][1] not in live
        ]
        for key in gone:
            del self._gauges[key]

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass


WORKER_LABEL = "worker"
SCRAPE_OK = "dynaq_worker_scrape_ok"


@dataclass(frozen=True, slots=True)
class WorkerText:
    """One worker's own exposition for a merged scrape, or why it is not in it."""

    worker: str
    text: bytes | None
    missing: str = ""
    """Why ``text`` is ``None`` (one line: it becomes a comment of the scrape)."""


class _Merged(Collector):
    def __init__(self, families: Sequence[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


NODE_WIDE = frozenset({LIVE_QUEUES})
"""Families every worker reads alike from the store they share (each queue's depth,
the store's own count): shown once for the node, unlabelled, so a sum over
``worker`` cannot count a message once per worker."""


def merge_workers(parts: Sequence[WorkerText]) -> bytes:
    """One exposition of every worker's: each sample gets ``worker="<name>"``, each
    family one HELP and TYPE, in the order the workers (then their families) come;
    then ``dynaq_worker_scrape_ok{worker}`` (1: in this scrape, 0: left out). A worker
    left out (no text, or text that does not parse) is named in a comment line. A
    :data:`NODE_WIDE` family's series are each the first worker's that has it, unlabelled."""
    merged: dict[tuple[str, str], Metric] = {}
    notes: list[str] = []
    scrape_ok = GaugeMetricFamily(
        SCRAPE_OK,
        "1 when the worker's figures are in this scrape, 0 when it did not answer in time",
        labels=[WORKER_LABEL],
    )
    for part in parts:
        families: list[Metric] = []
        missing = part.missing or "no answer"
        if part.text is not None:
            try:
                families = list(text_string_to_metric_families(part.text.decode()))
            except (ValueError, UnicodeDecodeError) as exc:
                missing, part = f"its figures do not parse ({exc})", WorkerText(part.worker, None)
        if part.text is None:
            notes.append(f"# dynaq: worker {part.worker} left out of this scrape: {missing}")
            scrape_ok.add_metric([part.worker], 0.0)
            continue
        scrape_ok.add_metric([part.worker], 1.0)
        for fam in families:
            out = merged.get((fam.name, fam.type))
            if out is None:
                out = Metric(fam.name, fam.documentation, fam.type, fam.unit)
                merged[(fam.name, fam.type)] = out
            if fam.name in NODE_WIDE:  # each series once: the first worker's that has it
                have = {tuple(sorted(x.labels.items())) for x in out.samples}
                out.samples.extend(
                    x for x in fam.samples if tuple(sorted(x.labels.items())) not in have
                )
                continue
            out.samples.extend(
                s._replace(labels={**s.labels, WORKER_LABEL: part.worker}) for s in fam.samples
            )
    text = generate_latest(_Merged([*merged.values(), scrape_ok]))
    head = "".join(" ".join(n.split()) + "\n" for n in notes)  # one line each
    return head.encode() + text
