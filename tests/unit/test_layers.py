"""The layer contract of dynaq, read from the source with ``ast`` (no import runs).

Floors, top to bottom; a module may import its own component and any
component on a lower floor, never one above or beside it (only the base
floor's small modules may import each other)::

    __main__                               python -m dynaq
    cli
    node                                   the composition root
    api, outbox
    services, cluster
    core
    storage
    errors, clock, tasks, stop_signals, config, metrics, logs

Beside the floors stand ``client``, ``spark``, ``processors`` and ``testing``: no server
component imports them (the CLI's admin commands use ``client``, as any
client of a node does); the ``dynaq`` package itself re-exports only from
``errors`` and ``client``; ``client`` imports at most ``errors``; ``spark``
imports only ``client``; ``processors`` (which runs in a worker process) imports
only ``client``, and only ``cli`` imports it; ``testing`` (which starts nodes as processes) may
import any of dynaq, but never pytest or the ``tests`` package.

Also forbidden: ``services`` and ``core`` importing aiohttp; anything in
``dynaq`` or ``bench`` importing ``tests``; anyone importing ``conftest``;
any module but the composition roots (``cli``, ``node``) importing the whole
``dynaq.config.Config`` (the others take their own section); ``api``
importing a ``parse_*`` function from ``services`` (wire parsing is the API
layer's job).

Every import counts, also one inside a function, except that an import under
``if TYPE_CHECKING:`` is exempt from the floor order (it is no runtime
dependency, and annotations may name a type from above), though not from the
forbidden packages and names.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FLOORS: list[set[str]] = [
    {"__main__"},
    {"cli"},
    {"node"},
    {"api", "outbox"},
    {"services", "streams", "cluster"},
    {"core"},
    {"storage"},
    {"errors", "clock", "tasks", "stop_signals", "config", "metrics", "prometheus", "logs"},
]
FLOOR = {component: i for i, floor in enumerate(FLOORS) for component in floor}
BASE = len(FLOORS) - 1
BESIDE = {"client", "spark", "processors", "testing"}
MAY_IMPORT_BESIDE = {
    "": {"errors", "client"},  # the package itself: its re-exports only
    "client": {"errors", "client"},
    "spark": {"client", "spark"},
    "processors": {"client", "processors"},
}
ROOTS = {"cli", "node"}
CLIENT_USERS = {"cli"}
"""Top-floor components that talk to nodes over HTTP, through the client (and run
processors, which do the same)."""
NO_AIOHTTP = {"services", "streams", "core"}
# `from dynaq import X` for a lazily re-exported X means the module X lives in.
REEXPORTS = {"Client": "dynaq.client", "DynaqError": "dynaq.errors"}

# Known violations, each to be deleted by the change that fixes it (a stale
# entry fails the test, so this list only shrinks). Keys are
# "importer -> imported module or name", as the failure message prints them.
KNOWN_VIOLATIONS: dict[str, str] = {}
"""Violations tolerated for now (none: keep it so)."""


@dataclass(frozen=True)
class Edge:
    """One imported module (and, for ``from m import n``, one name) at one line."""

    importer: str
    module: str
    name: str | None
    line: int
    type_checking: bool

    def key(self, with_name: bool = False) -> str:
        target = f"{self.module}.{self.name}" if with_name and self.name else self.module
        return f"{self.importer} -> {target}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                inside.update(id(n) for n in ast.walk(child))
    return inside


def edges(path: Path) -> Iterator[Edge]:
    """Every import in ``path``, resolved to absolute module names."""
    importer = _module_name(path)
    tree = ast.parse(path.read_text(), str(path))
    checking = _type_checking_nodes(tree)
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    for node in ast.walk(tree):
        tc = id(node) in checking
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Edge(importer, alias.name, None, node.lineno, tc)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if _is_module(sub):
                    yield Edge(importer, sub, None, node.lineno, tc)
                elif base == "dynaq" and alias.name in REEXPORTS:
                    yield Edge(importer, REEXPORTS[alias.name], alias.name, node.lineno, tc)
                else:
                    yield Edge(importer, base, alias.name, node.lineno, tc)


def component(module: str) -> str:
    """``dynaq.services.queues`` -> ``services``; the package itself is ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _top(module: str) -> str:
    return module.split(".")[0]


def violations_of(edge: Edge) -> Iterator[str]:
    """What ``edge`` breaks, as "key: reason" lines."""
    here, target = component(edge.importer), edge.module
    top = _top(target)
    if top in {"tests", "conftest"} or target.endswith(".conftest"):
        yield f"{edge.key()}: imports the test suite"
    if top != "dynaq":
        if top == "aiohttp" and here in NO_AIOHTTP:
            yield f"{edge.key()}: {here} must not know aiohttp"
        if top == "pytest" and here == "testing":
            yield f"{edge.key()}: dynaq.testing must not need pytest"
        return
    there = component(target)
    # The config package itself defines and re-exports Config.
    if there == "config" and edge.name == "Config" and here not in ROOTS | BESIDE | {"config"}:
        yield f"{edge.key(with_name=True)}: only cli and node know the whole Config"
    if (
        here == "api"
        and there == "services"
        and edge.name is not None
        and edge.name.startswith("parse_")
    ):
        yield f"{edge.key(with_name=True)}: wire parsing belongs to the api layer"
    if here == there or there == "" or here == "testing":
        return
    if here in MAY_IMPORT_BESIDE:
        if there not in MAY_IMPORT_BESIDE[here]:
            yield f"{edge.key()}: {here} imports only {sorted(MAY_IMPORT_BESIDE[here])}"
        return
    if there in ("client", "processors") and here in CLIENT_USERS:
        return
    if there in BESIDE:
        yield f"{edge.key()}: the server never imports {there}"
        return
    if edge.type_checking:
        return
    mine, theirs = FLOOR[here], FLOOR[there]
    if theirs < mine:
        yield f"{edge.key()}: upward ({here} -> {there})"
    elif theirs == mine and mine != BASE:
        yield f"{edge.key()}: sideways ({here} -> {there})"


def _sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def _all_violations() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in _sources("dynaq"):
        for edge in edges(path):
            for line in violations_of(edge):
                key, _, reason = line.partition(": ")
                found.setdefault(key, f"{reason} (line {edge.line})")
    return found


def test_every_component_has_a_place() -> None:
    known = set(FLOOR) | BESIDE | {""}
    components = {component(_module_name(p)) for p in _sources("dynaq")}
    assert components <= known, f"place these in FLOORS or BESIDE: {components - known}"


def test_dynaq_keeps_its_layers() -> None:
    found = _all_violations()
    new = {k: v for k, v in found.items() if k not in KNOWN_VIOLATIONS}
    stale = sorted(set(KNOWN_VIOLATIONS) - set(found))
    assert not new, "layer violations:\n" + "\n".join(f"  {k}: {v}" for k, v in new.items())
    assert not stale, "fixed, now delete from KNOWN_VIOLATIONS:\n  " + "\n  ".join(stale)


def test_bench_and_tests_never_import_the_suite_the_wrong_way() -> None:
    bad = [
        f"{e.key()} (line {e.line})"
        for path in _sources("bench")
        for e in edges(path)
        if _top(e.module) in {"tests", "conftest"}
    ]
    bad += [
        f"{e.key()} (line {e.line})"
        for path in _sources("tests")
        for e in edges(path)
        if e.module.split(".")[-1] == "conftest"
    ]
    assert not bad, "bench imports tests / someone imports conftest:\n  " + "\n  ".join(bad)


def test_the_checker_sees_what_it_should() -> None:
    def check(importer: str, module: str, name: str | None = None, tc: bool = False) -> list[str]:
        return list(violations_of(Edge(importer, module, name, 1, tc)))

    assert check("dynaq.storage.base", "dynaq.core.keys")  # upward
    assert check("dynaq.storage.base", "dynaq.services.queues")
    assert not check("dynaq.storage.base", "dynaq.services.queues", tc=True)
    assert check("dynaq.services.queues", "aiohttp")
    assert check("dynaq.services.queues", "aiohttp", tc=True)  # no exemption here
    assert check("dynaq.core.ids", "aiohttp.web")
    assert check("dynaq.api.v1", "dynaq.outbox.relay")  # sideways
    assert not check("dynaq.metrics", "dynaq.tasks")  # base floor
    assert check("dynaq.node", "dynaq.client")
    assert not check("dynaq.cli.queues", "dynaq.client")
    assert check("dynaq.cli.queues", "dynaq.testing")
    assert check("dynaq.node", "tests.fixtures.nodes")
    assert check("dynaq.spark.source", "dynaq.errors")
    assert not check("dynaq.spark.source", "dynaq.client")
    assert check("dynaq.testing.cluster", "pytest")
    assert not check("dynaq.testing.runners", "dynaq.config", "Config")
    assert check("dynaq.services.catalog", "dynaq.config", "Config")
    assert not check("dynaq.services.catalog", "dynaq.config", "QueueDefaults")
    assert check("dynaq.api.bulk", "dynaq.services.queues", "parse_id")
    assert not check("dynaq.node", "dynaq.storage.cassandra")
