"""Pieces of dynaq.processors that need no node: the delivery hash, graph declaration
rules, type filters, fault point arming, and the package's imports."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

from dynaq.processors import Graph, Strategy, delivery_hash, faults, queue, stream
from dynaq.processors.records import canonical
from tests.processors.harness import ROOT


def _f(x: object) -> object:
    return x


def test_delivery_hash_is_stable_and_canonical() -> None:
    # Pinned: the hash must not change between processes, versions or dict orders.
    assert delivery_hash("g.p", {"a": 1, "b": 2}) == delivery_hash("g.p", {"b": 2, "a": 1})
    assert delivery_hash("g.p", {"a": 1}) == "4ab8b3673865b4f0"
    by_hand = hashlib.sha256(b'{"proc":"g.p","tailers":{"a":1}}').digest()[:8].hex()
    assert by_hand == "4ab8b3673865b4f0"
    assert len({delivery_hash("g.p", {"a": i}) for i in range(1000)}) == 1000
    assert delivery_hash("g.p", {"a": 1}) != delivery_hash("g.q", {"a": 1})
    assert canonical({"b": 1, "a": [1, "é"]}) == '{"a":[1,"é"],"b":1}'.encode()


def test_graph_shapes_are_checked() -> None:
    g = Graph("shapes")
    g.transform("t", _f, "in", "out")
    with pytest.raises(ValueError, match="already has"):
        g.transform("t", _f, "in", "out")
    with pytest.raises(ValueError, match="one input and one output"):
        g.add("bad", "transform", _f, ["a", "b"], ["out"])
    with pytest.raises(ValueError, match="inputs and no output"):
        g.add("bad2", "sink", _f, ["a"], ["out"])
    with pytest.raises(ValueError, match="named twice"):
        g.join("j", _f, ["a", "a"], "out")
    with pytest.raises(ValueError, match="mixes streams and queues"):
        g.transform("q", _f, queue("jobs"), "out")  # exactly once: all queues or all streams
    ok = g.transform("q2", _f, queue("jobs"), queue("done"), strategy="at_least_once")
    assert ok.strategy is Strategy.AT_LEAST_ONCE
    with pytest.raises(ValueError, match="exactly_once only"):
        g.source("s", _f, "out", strategy="at_most_once")
    with pytest.raises(ValueError):
        Graph("no spaces")
    p = g.processors["t"]
    assert (p.id, p.backing) == ("shapes.t", "_cues.shapes.t")
    assert stream("x", {"type": "object", "required": ["n"]}).schema["required"] == ["n"]


def test_filters_go_by_the_type_member() -> None:
    g = Graph("filters")
    p = g.transform("t", _f, "in", "out", accepts=["order"])
    assert p.accepts_entry({"type": "order", "n": 1})
    assert not p.accepts_entry({"type": "refund"})
    assert not p.accepts_entry({"n": 1})  # no type member: type None
    assert g.transform("all", _f, "in", "out").accepts_entry({"n": 1})


def test_fault_points_arm_by_name_and_count() -> None:
    faults.arm("attempt.written:2")
    faults.point("snapshot.written")  # another point: nothing happens
    faults.point("attempt.written")  # the first time: nothing yet
    faults.arm(None)
    faults.point("attempt.written")
    for bad in ("attempt.writen:1", "attempt.written:0", "attempt.written", "x:y"):
        with pytest.raises(ValueError):
            faults.arm(bad)
    faults.arm("")


def test_the_nth_time_kills_the_process() -> None:
    code = (
        "from dynaq.processors import faults\n"
        "faults.arm('fn.done:2')\n"
        "faults.point('fn.done')\n"
        "print('first', flush=True)\n"
        "faults.point('fn.done')\n"
        "print('second')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == -9 and done.stdout == "first\n"


def test_processors_import_only_the_client() -> None:
    """It runs in a worker process: no node, service or API module may load with it."""
    code = "import sys, dynaq.processors; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    loaded = {m for m in done.stdout.split() if m.startswith("dynaq.")}
    server = {
        m
        for m in loaded
        if m.split(".")[1] in {"node", "api", "streams", "services", "core", "storage", "cluster"}
    }
    assert not server, server


def test_the_cli_loads_processors_only_for_a_worker() -> None:
    code = (
        "import sys, dynaq.cli; print('dynaq.processors' in sys.modules, 'aiohttp' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.split() == ["False", "False"]
