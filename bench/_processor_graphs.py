"""The graphs ``python -m bench processors`` runs: one transform per strategy, each
reading its own input stream and writing its own output stream (``dynaq worker
bench._processor_graphs:<strategy>`` from the repository root)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dynaq.processors import Graph


def _double(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {"n": entry["n"], "double": 2 * int(entry["n"]), "pad": entry.get("pad", "")}


def streams(strategy: str) -> tuple[str, str]:
    """The input and output stream of ``strategy``'s graph."""
    return f"pb-{strategy}-in", f"pb-{strategy}-out"


def _graph(strategy: str) -> Graph:
    g = Graph(f"pb-{strategy.replace('_', '-')}")
    src, out = streams(strategy)
    g.transform("double", _double, input=src, output=out, strategy=strategy)
    return g


def exactly_once() -> Graph:
    return _graph("exactly_once")


def at_least_once() -> Graph:
    return _graph("at_least_once")


def at_most_once() -> Graph:
    return _graph("at_most_once")
