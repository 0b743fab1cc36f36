"""Exactly once from queues to queues: each step commits as one transaction (inputs
deleted by receipt, outputs enqueued with the delivery hash as dedup id). Checked
with real workers SIGKILLed at each step of it and at random times, and with two
workers racing for the processor: every input consumed exactly once, its output
or its error enqueued exactly once, never both, never neither."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path

import pytest

from dynaq.client import Client, QueueSettings
from dynaq.processors import Graph, queue
from dynaq.testing.process import NodeProcess
from tests.processors.harness import Harness, wait_for

VISIBILITY_S = 1.0
"""The input queue's visibility timeout: an uncommitted step comes back this soon."""


def _setup(c: Client, t: str, n: int) -> list[int]:
    c.create_queue(f"{t}-qin", QueueSettings(visibility_timeout_s=VISIBILITY_S))
    for q in ("qout", "qerr"):
        c.create_queue(f"{t}-{q}")
    ns = list(range(1, n + 1))
    for lo in range(0, n, 100):
        c.enqueue(f"{t}-qin", [json.dumps({"n": k}) for k in ns[lo : lo + 100]])
    return ns


def _drain(c: Client, q: str) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    while got := c.receive(q, 100, 60):
        out.extend(json.loads(m.body) for m in got)
        c.delete(q, [m.id for m in got])
    return out


def _check(c: Client, t: str, ns: list[int]) -> None:
    """Every input consumed; each n's output (or, for a multiple of 7, its error)
    exactly once, never both, never neither."""
    assert c.receive(f"{t}-qin", 10, 60) == [], "an input was left"
    out = Counter(int(str(e["n"])) for e in _drain(c, f"{t}-qout"))
    errs = Counter(int(str(e["inputs"][f"{t}-qin"]["n"])) for e in _drain(c, f"{t}-qerr"))  # type: ignore[index]
    dup = sorted(n for n, k in (out + errs).items() if k > 1)
    assert not dup, f"delivered more than once: {dup[:10]}"
    assert not set(out) & set(errs), "an input went to both output and error"
    missing = sorted(set(ns) - set(out) - set(errs))
    assert not missing, f"never delivered: {missing[:10]}"
    assert sorted(errs) == [n for n in ns if n % 7 == 0]


def _done(c: Client, t: str) -> bool:
    info = c.describe_queue(f"{t}-qin")
    return info.visible + info.in_flight + info.depth == 0


@pytest.mark.parametrize(
    "point", ["recovery.start:1", "fn.done:1", "fn.done:5", "txn.committed:1", "txn.committed:5"]
)
def test_a_worker_killed_at_each_step_of_the_transaction(
    node: NodeProcess, tmp_path: Path, point: str
) -> None:
    t = f"qo{point.replace('.', '').replace(':', '')}"
    h = Harness(node, "queue_transform", t, tmp_path)
    with Client(node.url) as c:
        ns = _setup(c, t, 30)
        crashed = h.start(point)
        assert crashed.wait(30) is not None, "the fault point was never reached"
        assert crashed.proc.returncode == -9, crashed.log()
        clean = h.start()
        wait_for(lambda: _done(c, t), 60, "every input consumed")
        assert clean.terminate() == 0, clean.log()
        _check(c, t, ns)


def test_kill_9_at_random_times_and_two_workers_racing(node: NodeProcess, tmp_path: Path) -> None:
    t = "qorandom"
    rng = random.Random(14)
    h = Harness(node, "queue_transform", t, tmp_path)
    with Client(node.url) as c:
        ns = _setup(c, t, 300)
        for _ in range(8):
            a, b = h.start(), h.start()  # racing: only the lease holder steps
            time.sleep(rng.uniform(0.8, 2.0))
            rng.choice([a, b]).kill()
            time.sleep(rng.uniform(0.1, 0.6))
            a.kill()
            b.kill()
        last = h.start()
        wait_for(lambda: _done(c, t), 90, "every input consumed")
        assert last.terminate() == 0, last.log()
        _check(c, t, ns)


def test_mixing_streams_and_queues_under_exactly_once_is_refused() -> None:
    g = Graph("mixed")
    with pytest.raises(ValueError, match="mixes streams and queues"):
        g.transform("p", lambda e: e, queue("in"), "out-stream")
    with pytest.raises(ValueError, match="mixes streams and queues"):
        g.transform("p", lambda e: e, "in-stream", queue("out"))
    ok = g.transform("p", lambda e: e, queue("in"), queue("out"))
    assert ok.strategy == "exactly_once"
