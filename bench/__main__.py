"""Run one benchmark scenario: ``python -m bench <scenario> [options]``.

Without a scenario, lists the available ones. The last line of stdout is the
scenario's result as one JSON object. A result holding ``"ok": false`` (a
verdict, as ``chaos`` gives) makes the exit code 1.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

_NOT_SCENARIOS = {"__init__", "__main__", "common"}


def scenarios() -> list[str]:
    """Names of the modules in ``bench/`` that define a scenario."""
    here = Path(__file__).resolve().parent
    return sorted(
        p.stem
        for p in here.glob("*.py")
        if p.stem not in _NOT_SCENARIOS and not p.stem.startswith("_")
    )


def main(argv: list[str]) -> int:
    names = scenarios()
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m bench <scenario> [options]   (<scenario> --help for its options)")
        print("scenarios: " + ", ".join(names))
        return 0
    name = argv[0]
    if name not in names:
        print(f"unknown scenario {name!r}; available: {', '.join(names)}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"bench.{name}")
    run = getattr(module, "main", None)
    if run is None:
        print(f"bench/{name}.py has no main(argv) -> dict", file=sys.stderr)
        return 2
    result: dict[str, Any] = run(argv[1:])
    sys.stdout.flush()
    print(json.dumps(result), flush=True)
    return 1 if result.get("ok") is False else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
