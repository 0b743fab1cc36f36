"""One step's reads and its user function: which entries a step takes from its
inputs (by kind), and what the function's answer means as writes.

Reading is free of side effects on streams (a tailer is an index this worker
keeps), so a step may look at its inputs before its snapshot is written; what it
takes is fixed by the tailers in the snapshot (and, for alts, by which input
the first attempt took, recorded as ``snapshot-alts``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dynaq.processors.graph import Kind, Processor, StreamRef
from dynaq.processors.io import Stopping, StreamInput
from dynaq.processors.records import Tailers, stamped

log = logging.getLogger(__name__)
SOURCE_TAILER = "step"
"""A source's one tailer: its step counter."""
Write = dict[str, Any]
"""``{"stream": output name, "error": bool, "entry": stamped entry}``."""


class ProcessorError(Exception):
    """A processor that cannot go on as declared (an unhandled error)."""


@dataclass
class Selection:
    """What a step takes: ``taken`` (input → (index, entry)) and the tailers after it."""

    taken: dict[str, tuple[int, Any]]
    next: Tailers
    alts: str | None = None

    @property
    def entries(self) -> dict[str, Any]:
        return {name: e for name, (_, e) in self.taken.items()}


async def _pause(stop: asyncio.Event, delay: float) -> None:
    try:
        async with asyncio.timeout(delay):
            await stop.wait()
    except TimeoutError:
        return
    raise Stopping("stopping")


class Reader:
    """A processor's stream inputs, read at tailer indexes, skipping filtered entries."""

    def __init__(self, proc: Processor, inputs: Mapping[str, StreamInput]) -> None:
        self.proc, self.inputs = proc, inputs
        self._scanned: dict[str, tuple[int, int]] = {}

    async def peek(self, name: str, index: int) -> tuple[int, Any] | None:
        """The next accepted entry at or after ``index`` (None: none yet)."""
        start, upto = self._scanned.get(name, (index, index))
        i = upto if start == index else index
        inp = self.inputs[name]
        while True:
            ok, entry = await inp.entry_at(i)
            if not ok:
                self._scanned[name] = (index, i)
                return None
            if self.proc.accepts_entry(entry):
                inp.forget_before(index)
                return i, entry
            i += 1

    async def wait(self, name: str, index: int, stop: asyncio.Event) -> tuple[int, Any]:
        delay = 0.005
        while True:
            got = await self.peek(name, index)
            if got is not None:
                return got
            await _pause(stop, delay)
            delay = min(delay * 2, 0.1)

    async def select(
        self, tailers: Tailers, stop: asyncio.Event, forced: list[str] | None = None
    ) -> Selection:
        """Wait until the step's entries are there (:class:`Stopping` if stopped first)."""
        kind = self.proc.kind
        if kind is Kind.SOURCE:
            n = tailers[SOURCE_TAILER]
            return Selection({SOURCE_TAILER: (n, n)}, {SOURCE_TAILER: n + 1})
        if kind is Kind.ALTS:
            return await self._alts(tailers, stop, forced[0] if forced else None)
        taken = {}
        for name in tailers:  # every input, in order
            taken[name] = await self.wait(name, tailers[name], stop)
        nxt = {name: taken[name][0] + 1 for name in tailers}
        return Selection(taken, nxt)

    async def _alts(self, tailers: Tailers, stop: asyncio.Event, forced: str | None) -> Selection:
        if forced is not None:  # a retry takes what the first attempt took
            one = await self.wait(forced, tailers[forced], stop)
            return Selection({forced: one}, {**tailers, forced: one[0] + 1}, forced)
        delay = 0.005
        while True:
            for name in tailers:
                if (got := await self.peek(name, tailers[name])) is not None:
                    return Selection({name: got}, {**tailers, name: got[0] + 1}, name)
            await _pause(stop, delay)
            delay = min(delay * 2, 0.1)


@dataclass
class Handles:
    """What an imperative processor's function works with: :meth:`read` the next entry of
    an input, :meth:`write` an entry to an output (written when the function returns,
    with the step's exactly-once guarantee), :attr:`delivery_hash` for side effects.

    Reads must be deterministic: a retry of the step reads the same inputs in the same
    order (recorded on the first attempt); a retry asking another input is refused."""

    delivery_hash: str
    _reader: Reader
    _tailers: Tailers
    _stop: asyncio.Event
    _record: Callable[[str], Awaitable[None]] | None
    _replay: list[str]
    _outputs: frozenset[str]
    taken: dict[str, Any] = field(default_factory=dict)
    writes: list[tuple[str, Any]] = field(default_factory=list)
    _reads: int = 0

    broken: BaseException | None = None
    """What interrupted a read (stopping, the lease, the node): the step is abandoned
    even if the function caught it, never delivered as a handled error."""

    @property
    def next_tailers(self) -> Tailers:
        return dict(self._tailers)

    async def read(self, input: str) -> Any:
        """The next entry of ``input`` (waiting for it)."""
        if input not in self._tailers:
            raise ValueError(f"no input {input!r}")
        if self._reads < len(self._replay) and self._replay[self._reads] != input:
            self.broken = ProcessorError(
                f"retry read {input!r} where the first attempt read "
                f"{self._replay[self._reads]!r}: reads must be deterministic"
            )
            raise self.broken
        try:
            index, entry = await self._reader.wait(input, self._tailers[input], self._stop)
            if self._reads >= len(self._replay) and self._record is not None:
                await self._record(input)
        except BaseException as exc:
            self.broken = exc
            raise
        self._reads += 1
        self._tailers[input] = index + 1
        self.taken[f"{input}@{index}"] = entry
        return entry

    def write(self, output: str, entry: Mapping[str, Any]) -> None:
        if output not in self._outputs:
            raise ValueError(f"no output {output!r}")
        self.writes.append((output, entry))


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    got = fn(*args)
    return await got if inspect.isawaitable(got) else got


def _outputs(p: Processor) -> list[str]:
    return [o.name for o in p.outputs]


def _shape(p: Processor, got: Any) -> list[tuple[str, Any]]:
    """The user function's answer as ``(output, entry)`` pairs (TypeError/ValueError
    for an answer that does not fit the kind: a handled error like any other)."""
    k = p.kind
    if k in (Kind.FORK, Kind.JOIN_FORK):
        if not isinstance(got, Mapping):
            raise TypeError(f"a {k} returns {{output: entry}}, not {type(got).__name__}")
        unknown = sorted(set(got) - set(_outputs(p)))
        if unknown:
            raise ValueError(f"no output {unknown[0]!r}")
        pairs = [(o, got[o]) for o in _outputs(p) if got.get(o) is not None]
    else:
        pairs = [] if got is None else [(_outputs(p)[0], got)]
    for _, e in pairs:
        if not isinstance(e, Mapping):
            raise TypeError(f"an output entry is a JSON object, not {type(e).__name__}")
    return pairs


async def run_user(p: Processor, sel: Selection, h: str) -> tuple[list[tuple[str, Any]], bool]:
    """Run the user function on ``sel``: ``(writes, handled_error)`` where writes are
    ``(destination, entry)`` pairs, unstamped."""
    entries = sel.entries
    k = p.kind
    try:
        if k is Kind.SOURCE:
            got = await _call(p.fn, sel.taken[SOURCE_TAILER][0], h)
        elif k in (Kind.TRANSFORM, Kind.FORK):
            got = await _call(p.fn, entries[p.inputs[0].name])
        elif k is Kind.SINK:
            await _call(p.fn, entries, h)
            return [], False
        else:
            got = await _call(p.fn, entries)
        return _shape(p, got), False
    except Exception as exc:  # noqa: BLE001 - the user's code failed: a handled error
        return error_writes(p, exc, entries), True


def error_writes(
    p: Processor, exc: BaseException, entries: Mapping[str, Any]
) -> list[tuple[str, Any]]:
    """The error entry for ``exc`` (none without an error destination), and a log line."""
    log.warning(
        "processor function failed",
        extra={"processor": p.id, "error": f"{type(exc).__name__}: {exc}"},
    )
    if p.error is None:
        return []
    if p.error_entry is not None:
        try:
            return [(p.error.name, dict(p.error_entry(exc, entries)))]
        except Exception as again:  # noqa: BLE001 - the error builder failed: the default
            exc = again
    entry = {
        "error": f"{type(exc).__name__}: {exc}",
        "processor": p.id,
        "inputs": dict(entries),
    }
    return [(p.error.name, entry)]


def plan(p: Processor, h: str, pairs: list[tuple[str, Any]], error: bool) -> list[Write]:
    """The step's writes, each stamped with the delivery hash and its slot."""
    return [
        {"stream": dest, "error": error, "entry": stamped(entry, p.id, h, slot)}
        for slot, (dest, entry) in enumerate(pairs)
    ]


def initial_tailers(p: Processor) -> Tailers:
    if p.kind is Kind.SOURCE:
        return {SOURCE_TAILER: 0}
    return {e.name: 0 for e in p.inputs if isinstance(e, StreamRef)}


@dataclass
class Stats:
    """What a processor has done since this worker started it (for ``status()``)."""

    attempts: int = 0
    handled_errors: int = 0
    delivered: int = 0
    last_delivery_s: float | None = None
    """Wall-clock time (seconds since the epoch) of the last delivered step."""
