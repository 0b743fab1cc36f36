"""Crash runs over every fault point of the persistence and recovery components, for
every kind of processor, then the exactly-once checker.

Each run starts a real worker armed with one fault point (``name:nth``): it is
SIGKILLed the nth time it gets there. Before each run the test appends new inputs
(so every run has work) and a foreign entry to each output (so a recorded attempt
index is often taken by someone else when the next worker recovers: the
``index_taken`` path and ``recovery.attempt.written``). After the chain of crash
runs, a clean worker drains what is left and the checker reads every output back.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dynaq.client import Client
from dynaq.testing.process import NodeProcess
from tests.processors import checker
from tests.processors.checker import deliveries
from tests.processors.harness import Harness, wait_for

PERSISTENCE = [
    "snapshot.before",
    "snapshot.written",
    "fn.done",
    "attempt.written",
    "output.written",
]
RECOVERY = ["recovery.start", "recovery.read"]
REACH_S = 2.5
"""A run whose fault point was not reached within this is stopped gracefully."""


@dataclass
class Scenario:
    app: str
    points: list[str]
    noise: list[str]
    sent: dict[str, list[int]] = field(default_factory=dict)
    counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def streams(self, t: str) -> list[str]:
        return [f"{t}-{s}" for s in self.sent]


def _sequence(points: list[str]) -> list[str]:
    """Every point at nth 1 to 4; recovery points (reached once per start) at 1, each
    right after a crash that leaves them something to do."""
    seq: list[str] = []
    for nth in (1, 2, 3, 4):
        for p in points:
            seq.append(f"{p}:{nth}")
            if p == "attempt.written":
                seq += ["recovery.attempt.written:1", "recovery.output.written:1"]
        if nth == 1:
            seq += [f"{p}:1" for p in RECOVERY]
    return seq


def _feed(c: Client, t: str, kind: str, sc: Scenario) -> None:
    if kind in ("join", "imperative"):
        ns = [next(sc.counter) for _ in range(3)]
        for side in ("a", "b"):
            c.append(f"{t}-{side}", [{"n": n} for n in ns])
            sc.sent.setdefault(side, []).extend(ns)
    elif kind == "alts":
        ns = [next(sc.counter) for _ in range(3)]
        for side, part in (("a", [n for n in ns if n % 2]), ("b", [n for n in ns if not n % 2])):
            if part:
                c.append(f"{t}-{side}", [{"n": n} for n in part])
            sc.sent.setdefault(side, []).extend(part)
    else:
        ns = [next(sc.counter) for _ in range(3)]
        items = [{"n": n, "type": "item"} if kind == "sink" else {"n": n} for n in ns]
        if kind == "sink":
            items.insert(1, {"type": "skip", "n": -1})  # filtered out: never delivered
        c.append(f"{t}-in", items)
        sc.sent.setdefault("in", []).extend(ns)


def _delivered(c: Client, t: str, kind: str, tmp: Path) -> set[int]:
    """The distinct inputs delivered so far (to an output, an error or the effects)."""
    if kind == "sink":
        path = tmp / "effects.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return {json.loads(x)["n"] for x in lines}
    outs = {"fork": ["o1", "err"], "alts": ["out"]}.get(kind, ["out", "err"])
    got: set[int] = set()
    for o in outs:
        for e in deliveries(c, f"{t}-{o}"):
            inputs = e.get("inputs", {})
            first = next(iter(inputs.values()), None) if inputs else None
            got.add(int(e.get("n", e.get("a", -1))) if first is None else int(first["n"]))
    return got


def _check(c: Client, t: str, kind: str, sc: Scenario, tmp: Path) -> dict[str, int]:
    s = sc.sent
    if kind == "transform":
        return checker.check_transform(c, t, s["in"])
    if kind == "join":
        return checker.check_join(c, t, s["a"])
    if kind == "fork":
        return checker.check_fork(c, t, s["in"])
    if kind == "alts":
        return checker.check_alts(c, t, s["a"], s["b"])
    if kind == "sink":
        return checker.check_sink(tmp, s["in"])
    return checker.check_imperative(c, t, s["a"])


SCENARIOS: dict[str, Callable[[], Scenario]] = {
    "transform": lambda: Scenario("transform", PERSISTENCE, ["out", "err"]),
    "join": lambda: Scenario("join", PERSISTENCE, ["out", "err"]),
    "fork": lambda: Scenario("fork", PERSISTENCE, ["o1", "o2", "err"]),
    "alts": lambda: Scenario("alts", [*PERSISTENCE[:2], "alts.written", *PERSISTENCE[2:]], ["out"]),
    "sink": lambda: Scenario(
        "sink", ["snapshot.before", "snapshot.written", "fn.done", "nil.written"], []
    ),
    "imperative": lambda: Scenario(
        "imperative", [*PERSISTENCE[:2], "alts.written", *PERSISTENCE[2:]], ["out", "err"]
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(SCENARIOS))
def test_crash_at_every_fault_point_then_exactly_once(
    node: NodeProcess, tmp_path: Path, kind: str
) -> None:
    sc = SCENARIOS[kind]()
    t = f"crash-{kind}"
    h = Harness(node, sc.app, t, tmp_path, lease_ttl_s=0.4)
    killed: list[str] = []
    with Client(node.url) as c:
        first = h.start()  # declares the streams, then is stopped
        wait_for(lambda: _declared(c, t, sc), 20, "the graph's streams")
        assert first.terminate() == 0, first.log()
        for fault in _sequence(sc.points):
            _feed(c, t, kind, sc)
            for s in sc.noise:
                c.append(f"{t}-{s}", [{"foreign": True}])
            w = h.start(fault)
            rc = w.wait(REACH_S)
            if rc is None:
                # Not reached: a graceful stop. A loaded machine may reach the point
                # during the stop itself, which is a crash there all the same.
                rc = w.terminate()
                if rc == 0:
                    continue
            assert rc == -9, f"{fault}: exit {rc}\n{w.log()}"
            killed.append(fault)
        sent = {n for k, v in sc.sent.items() for n in v}
        last = h.start()
        wait_for(lambda: _delivered(c, t, kind, tmp_path) >= sent, 60, "the last deliveries")
        assert last.terminate() == 0, last.log()
        summary = _check(c, t, kind, sc, tmp_path)
    reached = {f.split(":")[0] for f in killed}
    # Every fault point of this kind really crashed a worker at least once, and the
    # recovery-side ones too (the foreign entries make recovery re-attempt).
    expected = set(sc.points) | set(RECOVERY)
    if kind != "sink":
        expected |= {"recovery.attempt.written", "recovery.output.written"}
    assert reached >= expected, f"never reached: {expected - reached}"
    print(f"{kind}: {len(killed)} crashes of {h.started - 2} runs; {summary}")


def _declared(c: Client, t: str, sc: Scenario) -> bool:
    """The backing stream is declared last: then every stream of the graph is there."""
    return any(s.name.startswith(f"_cues.{t}-g.") for s in c.list_streams(hidden=True))
