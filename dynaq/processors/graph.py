"""Declaring a processing graph: processors of a kind, reading inputs and writing
outputs, each with a delivery strategy.

A :class:`Graph` is a named set of :class:`Processor` s. Each processor reads
one or more inputs and writes zero or more outputs; inputs and outputs are
dynaq streams (named by a plain string, or :func:`stream`) or queues
(:func:`queue`). Kinds, as Cues has them:

========== ============================= =============================================
kind       reads                         user function
========== ============================= =============================================
source     nothing (a step counter)      ``fn(step, delivery_hash) -> entry | None``
transform  one input                     ``fn(entry) -> entry | None``
join       one entry from every input    ``fn({input: entry}) -> entry | None``
fork       one input                     ``fn(entry) -> {output: entry}``
join_fork  one entry from every input    ``fn({input: entry}) -> {output: entry}``
alts       whichever input has one next  ``fn({input: entry}) -> entry | None`` (one key)
sink       one entry from every input    ``fn({input: entry}, delivery_hash) -> None``
imperative what it asks for              ``fn(handles) -> None`` (:class:`~dynaq.processors.steps.Handles`)
========== ============================= =============================================

Functions may be plain or ``async``. Entries are JSON objects.

**Filters by type.** An entry's *type* is its top-level ``"type"`` member (a
string; an entry without one has type ``None``). A processor declared with
``accepts={"order", "refund"}`` is handed only entries whose type is one of
those; it skips the others (its tailer passes them, nothing is delivered for
them). Without ``accepts`` it takes every entry.

**Errors.** An exception raised by the user function is *handled*: logged,
counted, and, if the processor has an ``error`` destination, written there as
``{"error": "<Class>: <text>", "processor": ..., "inputs": {input: entry}}``
(or what ``error_entry(exc, inputs)`` returns); without one, the input counts
as delivered with no output. Any other failure (the node unreachable, the lease
lost) interrupts the processor; it recovers and retries.

**Strategies** (per processor): ``exactly_once`` (default; see
:mod:`dynaq.processors.exactly_once`), ``at_least_once`` (the input position
is committed after the outputs are written: a crash repeats a step),
``at_most_once`` (committed before: a crash loses a step).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]{0,30}")
"""Graph and processor names (they make up backing stream names, ≤ 80 characters)."""

UserFn = Callable[..., Any]
ErrorEntry = Callable[[BaseException, Mapping[str, Any]], Mapping[str, Any]]


class Kind(StrEnum):
    SOURCE = "source"
    TRANSFORM = "transform"
    JOIN = "join"
    FORK = "fork"
    JOIN_FORK = "join_fork"
    ALTS = "alts"
    SINK = "sink"
    IMPERATIVE = "imperative"


class Strategy(StrEnum):
    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"
    AT_MOST_ONCE = "at_most_once"


@dataclass(frozen=True)
class StreamRef:
    """A dynaq stream as an input or output; ``schema`` is what it is declared with
    when the graph starts and it is missing."""

    name: str
    schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    order_key: str | None = None


@dataclass(frozen=True)
class QueueRef:
    """A dynaq queue as an input (receive, then delete) or output (enqueue); entries
    travel as JSON message bodies. Exactly once needs every endpoint of the processor
    to be a queue (each step is one transaction: :mod:`dynaq.processors.queue_once`)."""

    name: str


Endpoint = StreamRef | QueueRef


def stream(
    name: str, schema: Mapping[str, Any] | None = None, order_key: str | None = None
) -> StreamRef:
    """A stream endpoint (a plain string means the same, with an object schema)."""
    return StreamRef(name, schema or {"type": "object"}, order_key)


def queue(name: str) -> QueueRef:
    """A queue endpoint."""
    return QueueRef(name)


def _endpoint(x: str | Endpoint) -> Endpoint:
    return StreamRef(x) if isinstance(x, str) else x


@dataclass(frozen=True)
class Processor:
    """One processor of a graph (build them with the :class:`Graph` methods)."""

    graph: str
    name: str
    kind: Kind
    fn: UserFn
    inputs: tuple[Endpoint, ...]
    outputs: tuple[Endpoint, ...]
    error: Endpoint | None = None
    strategy: Strategy = Strategy.EXACTLY_ONCE
    accepts: frozenset[str] | None = None
    error_entry: ErrorEntry | None = None

    @property
    def id(self) -> str:
        """``<graph>.<processor>``: what the delivery hash and the status name it by."""
        return f"{self.graph}.{self.name}"

    @property
    def backing(self) -> str:
        """The hidden stream holding this processor's snapshots, attempts, positions."""
        return f"_cues.{self.graph}.{self.name}"

    def accepts_entry(self, entry: Any) -> bool:
        if self.accepts is None:
            return True
        kind = entry.get("type") if isinstance(entry, dict) else None
        return kind in self.accepts

    def endpoints(self) -> list[Endpoint]:
        extra = [] if self.error is None else [self.error]
        return [*self.inputs, *self.outputs, *extra]


class Graph:
    """A named graph of processors; a worker runs it (``dynaq worker module:graph``)."""

    def __init__(self, name: str) -> None:
        if not NAME.fullmatch(name):
            raise ValueError(f"graph name {name!r}: 1-31 of letters, digits, '_', '-'")
        self.name = name
        self.processors: dict[str, Processor] = {}

    def add(
        self,
        name: str,
        kind: Kind | str,
        fn: UserFn,
        inputs: Iterable[str | Endpoint] = (),
        outputs: Iterable[str | Endpoint] = (),
        *,
        error: str | Endpoint | None = None,
        strategy: Strategy | str = Strategy.EXACTLY_ONCE,
        accepts: Iterable[str] | None = None,
        error_entry: ErrorEntry | None = None,
    ) -> Processor:
        """Add a processor (the kind-named methods below are shorthands)."""
        if not NAME.fullmatch(name):
            raise ValueError(f"processor name {name!r}: 1-31 of letters, digits, '_', '-'")
        if name in self.processors:
            raise ValueError(f"graph {self.name!r} already has a processor {name!r}")
        p = Processor(
            self.name,
            name,
            Kind(kind),
            fn,
            tuple(_endpoint(i) for i in inputs),
            tuple(_endpoint(o) for o in outputs),
            None if error is None else _endpoint(error),
            Strategy(strategy),
            None if accepts is None else frozenset(accepts),
            error_entry,
        )
        _check(p)
        self.processors[name] = p
        return p

    def source(self, name: str, fn: UserFn, output: str | Endpoint, **kw: Any) -> Processor:
        return self.add(name, Kind.SOURCE, fn, (), [output], **kw)

    def transform(
        self, name: str, fn: UserFn, input: str | Endpoint, output: str | Endpoint, **kw: Any
    ) -> Processor:
        return self.add(name, Kind.TRANSFORM, fn, [input], [output], **kw)

    def join(
        self,
        name: str,
        fn: UserFn,
        inputs: Iterable[str | Endpoint],
        output: str | Endpoint,
        **kw: Any,
    ) -> Processor:
        return self.add(name, Kind.JOIN, fn, inputs, [output], **kw)

    def fork(
        self,
        name: str,
        fn: UserFn,
        input: str | Endpoint,
        outputs: Iterable[str | Endpoint],
        **kw: Any,
    ) -> Processor:
        return self.add(name, Kind.FORK, fn, [input], outputs, **kw)

    def join_fork(
        self,
        name: str,
        fn: UserFn,
        inputs: Iterable[str | Endpoint],
        outputs: Iterable[str | Endpoint],
        **kw: Any,
    ) -> Processor:
        return self.add(name, Kind.JOIN_FORK, fn, inputs, outputs, **kw)

    def alts(
        self,
        name: str,
        fn: UserFn,
        inputs: Iterable[str | Endpoint],
        output: str | Endpoint,
        **kw: Any,
    ) -> Processor:
        return self.add(name, Kind.ALTS, fn, inputs, [output], **kw)

    def sink(self, name: str, fn: UserFn, inputs: Iterable[str | Endpoint], **kw: Any) -> Processor:
        return self.add(name, Kind.SINK, fn, inputs, (), **kw)

    def imperative(
        self,
        name: str,
        fn: UserFn,
        inputs: Iterable[str | Endpoint],
        outputs: Iterable[str | Endpoint],
        **kw: Any,
    ) -> Processor:
        return self.add(name, Kind.IMPERATIVE, fn, inputs, outputs, **kw)


def _check(p: Processor) -> None:
    """Refuse a processor whose shape does not fit its kind or strategy."""
    ins, outs = len(p.inputs), len(p.outputs)
    need = {
        Kind.SOURCE: (ins == 0 and outs == 1, "no input and one output"),
        Kind.TRANSFORM: (ins == 1 and outs == 1, "one input and one output"),
        Kind.JOIN: (ins >= 1 and outs == 1, "inputs and one output"),
        Kind.FORK: (ins == 1 and outs >= 1, "one input and outputs"),
        Kind.JOIN_FORK: (ins >= 1 and outs >= 1, "inputs and outputs"),
        Kind.ALTS: (ins >= 1 and outs == 1, "inputs and one output"),
        Kind.SINK: (ins >= 1 and outs == 0, "inputs and no output"),
        Kind.IMPERATIVE: (ins >= 1, "inputs"),
    }
    ok, what = need[p.kind]
    if not ok:
        raise ValueError(f"processor {p.name!r}: a {p.kind} has {what}")
    names = [e.name for e in p.inputs]
    if len(set(names)) != len(names):
        raise ValueError(f"processor {p.name!r}: an input is named twice")
    queues = [isinstance(e, QueueRef) for e in p.endpoints()]
    # Exactly once over queues commits each step as one transaction (delete the inputs
    # by receipt, enqueue the outputs): every endpoint must then be a queue.
    if (
        p.strategy is Strategy.EXACTLY_ONCE
        and any(queues)
        and (not all(queues) or p.kind in (Kind.SOURCE, Kind.IMPERATIVE))
    ):
        raise ValueError(
            f"processor {p.name!r}: exactly_once mixes streams and queues (or is a "
            f"{p.kind} over queues); exactly once runs over streams only or over "
            "queues only (transform, join, fork, join_fork, alts, sink): use "
            "at_least_once (outputs carry the delivery hash as dedup id) or at_most_once"
        )
    if p.kind in (Kind.SOURCE, Kind.IMPERATIVE) and p.strategy is not Strategy.EXACTLY_ONCE:
        raise ValueError(f"processor {p.name!r}: a {p.kind} runs exactly_once only")
