"""Processor status: what each running processor (see ``dynaq worker``) last reported.

Processors run in worker processes, not in the node: a worker holds each of its
processors' leases and steps them, and every few seconds it reports each one's
tailer positions, lag, attempts and handled errors here. The node keeps the last
report of every processor durably in its store (``c/p/<name>``), so
``GET /v2/processors`` answers after a node restart too, and marks a report
``alive`` while it is younger than three of the worker's report intervals: a
processor whose worker died shows as not alive with its last positions. The
truth of where a processor stands is its backing stream; a report is an
operator's view of it, never read back by the processor.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.errors import InvalidInput, InvalidName, NotFound
from dynaq.metrics import Metrics
from dynaq.storage.base import Store

PROCESSOR_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,159}")
"""``<graph>.<processor>``: 1-160 of letters, digits, ``_``, ``-``, ``.``."""

KINDS = frozenset(
    {"source", "sink", "transform", "join", "fork", "join_fork", "alts", "imperative"}
)
STRATEGIES = frozenset({"exactly_once", "at_least_once", "at_most_once"})
STATES = frozenset(
    {"starting", "recovering", "running", "waiting_for_lease", "interrupted", "stopped"}
)
INPUT_KINDS = frozenset({"stream", "queue"})
MAX_IO = 64
"""Inputs or outputs one processor may report."""
_MAX_TEXT = 1024
_MAX_INT = 2**63 - 1
_LIST_LIMIT = 10_000


class ProcessorNotFound(NotFound):
    """No report of that processor."""

    code = "processor_not_found"


@dataclass(frozen=True, slots=True)
class InputPosition:
    """Where a processor stands on one input: for a stream, the index of the next
    entry it reads and how many entries are ahead of it; a queue has no position."""

    name: str
    kind: str
    position: int | None
    lag: int | None


@dataclass(frozen=True, slots=True)
class ProcessorReport:
    """A worker's last report of one processor (see the module docstring)."""

    name: str
    graph: str
    kind: str
    strategy: str
    state: str
    worker: str
    inputs: list[InputPosition]
    outputs: list[str]
    error: str | None
    attempts: int
    delivered: int
    handled_errors: int
    last_delivery_ms: int | None
    interval_s: float
    reported_ms: int = 0

    @property
    def lag(self) -> int:
        """Entries ahead of the processor over all its stream inputs."""
        return sum(i.lag or 0 for i in self.inputs)

    def to_json(self, now_ms: int) -> dict[str, Any]:
        out = asdict(self)
        age = max(0.0, (now_ms - self.reported_ms) / 1000)
        out["age_s"] = round(age, 3)
        out["alive"] = self.state != "stopped" and age < 3 * self.interval_s
        out["lag"] = self.lag
        return out


class ProcessorRegistry:
    """Keeps and serves processor reports (see the module docstring)."""

    def __init__(self, store: Store, clock: Clock, metrics: Metrics) -> None:
        self._store = store
        self._clock = clock
        self._metrics = metrics

    async def report(self, name: str, body: Any) -> dict[str, Any]:
        """Store ``body`` as the processor's latest report (:class:`InvalidInput` if it
        is not one); emit its gauges; return it as ``GET`` shows it."""
        rep = parse_report(check_processor_name(name), body, self._clock.wall_ms())
        await self._store.put(_key(name), json.dumps(asdict(rep)).encode())
        prefix = f"processors.{name}"
        self._metrics.gauge(f"{prefix}.lag.count", rep.lag)
        self._metrics.gauge(f"{prefix}.attempts.count", rep.attempts)
        self._metrics.gauge(f"{prefix}.delivered.count", rep.delivered)
        self._metrics.gauge(f"{prefix}.handled_errors.count", rep.handled_errors)
        return rep.to_json(self._clock.wall_ms())

    async def get(self, name: str) -> dict[str, Any]:
        item = await self._store.get(_key(check_processor_name(name)))
        if item is None:
            raise ProcessorNotFound(f"no processor {name!r} has reported")
        return _decode(item.value).to_json(self._clock.wall_ms())

    async def all(self) -> list[dict[str, Any]]:
        """Every processor's last report, by name."""
        rows = await self._store.scan(keys.PROCESSOR, _end(), _LIST_LIMIT)
        now = self._clock.wall_ms()
        return [_decode(raw).to_json(now) for _, raw in rows]

    async def forget(self, name: str) -> None:
        """Drop a processor's report (its worker is gone for good)."""
        if not await self._store.delete(_key(check_processor_name(name))):
            raise ProcessorNotFound(f"no processor {name!r} has reported")


def check_processor_name(name: str) -> str:
    if not PROCESSOR_NAME.fullmatch(name):
        raise InvalidName(
            f"invalid processor name {name!r}: use 1-160 letters, digits, '_', '-' or '.', "
            "starting with a letter, digit or '_'"
        )
    return name


def _key(name: str) -> bytes:
    return keys.PROCESSOR + name.encode()


def _end() -> bytes:
    return keys.PROCESSOR[:-1] + bytes([keys.PROCESSOR[-1] + 1])


def _decode(raw: bytes) -> ProcessorReport:
    d = json.loads(raw)
    d["inputs"] = [InputPosition(**i) for i in d["inputs"]]
    return ProcessorReport(**d)


_MEMBERS: dict[str, type | tuple[type, ...]] = {
    "graph": str,
    "kind": str,
    "strategy": str,
    "state": str,
    "worker": str,
    "inputs": list,
    "outputs": list,
    "error": (str, type(None)),
    "attempts": int,
    "delivered": int,
    "handled_errors": int,
    "last_delivery_ms": (int, type(None)),
    "interval_s": (int, float),
}


def parse_report(name: str, body: Any, now_ms: int) -> ProcessorReport:
    """Validate a report body member by member (precise :class:`InvalidInput`)."""
    if not isinstance(body, dict):
        raise InvalidInput("a processor report is a JSON object")
    unknown = sorted(set(body) - set(_MEMBERS))
    if unknown:
        raise InvalidInput(f"unknown member {unknown[0]!r} in a processor report")
    missing = sorted(set(_MEMBERS) - set(body) - {"error", "last_delivery_ms"})
    if missing:
        raise InvalidInput(f"a processor report needs {missing[0]!r}")
    for member, types in _MEMBERS.items():
        value = body.get(member)
        if member in body and (isinstance(value, bool) or not isinstance(value, types)):
            raise InvalidInput(f"{member!r} has the wrong type")
    for member in ("attempts", "delivered", "handled_errors", "last_delivery_ms"):
        v = body.get(member)
        if v is not None and not 0 <= v <= _MAX_INT:
            raise InvalidInput(f"{member!r} must be in 0..{_MAX_INT}")
    for member, allowed in (("kind", KINDS), ("strategy", STRATEGIES), ("state", STATES)):
        if body[member] not in allowed:
            raise InvalidInput(f"{member!r} must be one of {sorted(allowed)}")
    if not 0 < body["interval_s"] <= 3600:
        raise InvalidInput("'interval_s' must be in (0, 3600]")
    for member in ("graph", "worker", "error"):
        v = body.get(member)
        if isinstance(v, str) and (len(v) > _MAX_TEXT or (member != "error" and not v)):
            raise InvalidInput(f"{member!r} must hold 1..{_MAX_TEXT} characters")
    if len(body["inputs"]) > MAX_IO or len(body["outputs"]) > MAX_IO:
        raise InvalidInput(f"at most {MAX_IO} inputs and {MAX_IO} outputs")
    outputs = body["outputs"]
    if not all(isinstance(o, str) and 0 < len(o) <= _MAX_TEXT for o in outputs):
        raise InvalidInput("'outputs' holds names (1..1024 characters)")
    return ProcessorReport(
        name=name,
        graph=body["graph"],
        kind=body["kind"],
        strategy=body["strategy"],
        state=body["state"],
        worker=body["worker"],
        inputs=[_input(i) for i in body["inputs"]],
        outputs=list(outputs),
        error=body.get("error"),
        attempts=body["attempts"],
        delivered=body["delivered"],
        handled_errors=body["handled_errors"],
        last_delivery_ms=body.get("last_delivery_ms"),
        interval_s=float(body["interval_s"]),
        reported_ms=now_ms,
    )


def _input(raw: Any) -> InputPosition:
    if not isinstance(raw, dict) or set(raw) - {"name", "kind", "position", "lag"}:
        raise InvalidInput("each input is {name, kind, position?, lag?}")
    name, kind = raw.get("name"), raw.get("kind")
    if not isinstance(name, str) or not 0 < len(name) <= _MAX_TEXT:
        raise InvalidInput("an input's 'name' holds 1..1024 characters")
    if not isinstance(kind, str) or kind not in INPUT_KINDS:
        raise InvalidInput(f"an input's 'kind' is one of {sorted(INPUT_KINDS)}")
    out: dict[str, int | None] = {}
    for member in ("position", "lag"):
        v = raw.get(member)
        if v is not None and (
            isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _MAX_INT
        ):
            raise InvalidInput(f"an input's {member!r} is a non-negative integer or null")
        out[member] = v
    return InputPosition(name, kind, out["position"], out["lag"])
