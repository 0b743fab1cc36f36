"""The graphs the processor tests run in real ``dynaq worker`` processes.

Each is a function returning a :class:`~dynaq.processors.Graph` (the worker calls
it): its stream names start with ``$CUES_T`` so every test has its own, and the
sink writes its side effects to the files under ``$CUES_DIR``.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dynaq.processors import Graph, Handles, queue


def _t() -> str:
    return os.environ["CUES_T"]


def _strategy() -> str:
    return os.environ.get("CUES_STRATEGY", "exactly_once")


def double(entry: Mapping[str, Any]) -> dict[str, Any]:
    n = int(entry["n"])
    if n % 7 == 0:
        raise ValueError(f"{n} is a multiple of 7")
    return {"n": n, "double": 2 * n}


def transform() -> Graph:
    t = _t()
    g = Graph(f"{t}-g")
    g.transform("double", double, f"{t}-in", f"{t}-out", error=f"{t}-err", strategy=_strategy())
    return g


def _pair(entries: Mapping[str, Any]) -> dict[str, Any]:
    t = _t()
    a, b = entries[f"{t}-a"]["n"], entries[f"{t}-b"]["n"]
    if a % 5 == 0:
        raise ValueError(f"{a} is a multiple of 5")
    return {"a": a, "b": b}


def join() -> Graph:
    t = _t()
    g = Graph(f"{t}-g")
    g.join("pair", _pair, [f"{t}-a", f"{t}-b"], f"{t}-out", error=f"{t}-err")
    return g


def _split(entry: Mapping[str, Any]) -> dict[str, Any]:
    t, n = _t(), int(entry["n"])
    if n % 5 == 0:
        raise ValueError(f"{n} is a multiple of 5")
    # Odd n go to both outputs, even n only to the first: a fork writes 1 or 2 slots.
    out = {f"{t}-o1": {"n": n}}
    if n % 2:
        out[f"{t}-o2"] = {"n": n, "odd": True}
    return out


def fork() -> Graph:
    t = _t()
    g = Graph(f"{t}-g")
    g.fork("split", _split, f"{t}-in", [f"{t}-o1", f"{t}-o2"], error=f"{t}-err")
    return g


def _either(entries: Mapping[str, Any]) -> dict[str, Any]:
    ((src, entry),) = entries.items()
    return {"src": src, "n": entry["n"]}


def alts() -> Graph:
    t = _t()
    g = Graph(f"{t}-g")
    g.alts("either", _either, [f"{t}-a", f"{t}-b"], f"{t}-out")
    return g


def _effect(n: int, h: str) -> None:
    """The sink's side effect, idempotent by delivery hash: every call is logged to
    ``calls.jsonl``; the effect (``effects.jsonl``) is written once per hash, under a
    file lock, in the same critical section as the check (the pattern a database
    transaction gives: see examples/processors/postgres_sink.py)."""
    d = Path(os.environ["CUES_DIR"])
    line = json.dumps({"hash": h, "n": n}) + "\n"
    with open(d / "calls.jsonl", "a") as calls:
        calls.write(line)
    with open(d / "effects.jsonl", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        if any(json.loads(x)["hash"] == h for x in f.read().splitlines() if x):
            return
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def _sink(entries: Mapping[str, Any], delivery_hash: str) -> None:
    ((entry,),) = [tuple(entries.values())]
    if entry.get("type") == "skip":
        raise AssertionError("filtered entries never reach the function")
    _effect(int(entry["n"]), delivery_hash)


def sink() -> Graph:
    t = _t()
    g = Graph(f"{t}-g")
    g.sink("effects", _sink, [f"{t}-in"], accepts=["item"], strategy=_strategy())
    return g


async def _zip(h: Handles) -> None:
    t = _t()
    a = await h.read(f"{t}-a")
    b = await h.read(f"{t}-b")
    if a["n"] % 5 == 0:
        raise ValueError(f"{a['n']} is a multiple of 5")
    h.write(f"{t}-out", {"a": a["n"], "b": b["n"], "hash": h.delivery_hash})


def imperative() -> Graph:
    t = _t()
    g = Graph(f"{t}-g")
    g.imperative("zip", _zip, [f"{t}-a", f"{t}-b"], [f"{t}-out"], error=f"{t}-err")
    return g


def _count(step: int, delivery_hash: str) -> dict[str, Any] | None:
    limit = int(os.environ.get("CUES_SOURCE_LIMIT", "20"))
    return {"n": step} if step < limit else None


def source() -> Graph:
    t = _t()
    g = Graph(f"{t}-g")
    g.source("count", _count, f"{t}-out")
    return g


def queue_transform() -> Graph:
    """``double`` from queue ``<t>-qin`` to queue ``<t>-qout``, errors to ``<t>-qerr``."""
    t = _t()
    g = Graph(f"{t}-qg")
    g.transform(
        "double",
        double,
        queue(f"{t}-qin"),
        queue(f"{t}-qout"),
        error=queue(f"{t}-qerr"),
        strategy=_strategy(),
    )
    return g
