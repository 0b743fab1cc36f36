"""The example graph of the README's "Processors" section.

``double`` reads stream ``ex-in`` (entries ``{"n": <int>}``) and appends
``{"n": n, "double": 2 * n}`` to ``ex-out``, exactly once. For an ``n`` that is a
multiple of 7 the function raises; the handled error goes to ``ex-errors`` as
``{"n": n, "error": "<the error text>"}``. The streams are declared when missing.

Run it from the repository root::

    dynaq worker examples.processors.pipeline:graph --endpoint http://127.0.0.1:8081

Outputs also carry ``_cues: {"hash", "slot", "proc"}`` (the delivery's metadata);
``n`` and ``double`` stay plain top-level members.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dynaq.processors import Graph


class MultipleOfSeven(ValueError):
    """The example's handled error."""


def double(entry: Mapping[str, Any]) -> dict[str, Any]:
    n = int(entry["n"])
    if n % 7 == 0:
        raise MultipleOfSeven(f"{n} is a multiple of 7")
    return {"n": n, "double": 2 * n}


def error_entry(exc: BaseException, inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {"n": inputs["ex-in"]["n"], "error": str(exc)}


graph = Graph("pipeline")
graph.transform(
    "double", double, input="ex-in", output="ex-out", error="ex-errors", error_entry=error_entry
)
