"""The public API is pinned: what ``dynaq``, ``dynaq.client``, ``dynaq.processors`` and
``dynaq.testing`` export.

A change to any list here is an API change: make it on purpose, and say so in
the changelog. ``import dynaq`` and ``import dynaq.config`` must stay light
(no server code, no msgpack), so that the CLI parses config and the Spark
worker loads the client without pulling in the node.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import dynaq
import dynaq.client
import dynaq.processors
import dynaq.testing

ROOT = Path(__file__).resolve().parents[2]

PUBLIC = {
    "dynaq": ["Client", "DynaqError", "__version__"],
    "dynaq.client": [
        "MAX_BATCH",
        "MSGPACK",
        "Appended",
        "AsyncClient",
        "BatchCompletion",
        "BatchInfo",
        "BrowsePage",
        "Client",
        "Consumer",
        "Delivery",
        "DynaqError",
        "Health",
        "ItemBlock",
        "NewMessage",
        "PartitionRange",
        "PeekedMessage",
        "Producer",
        "PublisherLease",
        "QueueInfo",
        "QueueSettings",
        "ReceivedMessage",
        "RetryPolicy",
        "RingMember",
        "StreamDeclared",
        "StreamEntry",
        "StreamInfo",
        "TaskInfo",
        "TxnDelete",
        "TxnEnqueue",
        "TxnOutput",
        "TxnResult",
    ],
    "dynaq.processors": [
        "META",
        "STATUS_KEYS",
        "Graph",
        "GraphRunner",
        "Handles",
        "Kind",
        "Processor",
        "QueueRef",
        "Strategy",
        "StreamRef",
        "delivery_hash",
        "queue",
        "stream",
    ],
    "dynaq.testing": [
        "Cluster",
        "FaultPlan",
        "History",
        "NodeServer",
        "ServerUnavailable",
        "SettingValue",
        "Verdict",
        "Workload",
        "check",
        "free_port",
        "run_cassandra",
        "run_cluster",
        "run_node",
        "run_postgres",
        "run_statsd",
        "run_workload",
        "settings_env",
    ],
}

# Modules `import dynaq.config` may load beyond dynaq, dynaq.config and
# dynaq.errors: none (the CLI and every process import it first).
KNOWN_CONFIG_EXTRAS: set[str] = set()


def _exported(module: ModuleType) -> list[str]:
    """``__all__``, or (for a module that has none yet) the public names it defines."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return [
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and getattr(value, "__module__", module.__name__) == module.__name__
    ]


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_exported_names_are_pinned(name: str) -> None:
    module = sys.modules[name]
    assert sorted(_exported(module)) == sorted(PUBLIC[name])
    for attr in PUBLIC[name]:
        assert getattr(module, attr) is not None, f"{name}.{attr} does not resolve"


def test_top_level_names_are_the_originals() -> None:
    from dynaq.client import Client
    from dynaq.errors import DynaqError

    assert dynaq.Client is Client
    assert dynaq.DynaqError is DynaqError
    assert "Client" in dir(dynaq)
    with pytest.raises(AttributeError):
        _ = dynaq.NoSuchThing  # type: ignore[attr-defined]


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    # The errors package counts as one module: its submodules are its parts.
    return {
        "dynaq.errors" if m.startswith("dynaq.errors.") else m
        for m in done.stdout.split()
        if m == "dynaq" or m.startswith("dynaq.")
    }


def test_import_dynaq_loads_only_the_errors() -> None:
    assert _modules_after("import dynaq") == {"dynaq", "dynaq.errors"}


def test_import_dynaq_client_loads_no_aiohttp() -> None:
    """Spark workers import the blocking client: the asyncio side loads only when asked for."""
    code = "import sys, dynaq.client; print('aiohttp' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "False"


def test_import_dynaq_config_stays_light() -> None:
    loaded = _modules_after("import dynaq.config")
    assert loaded - KNOWN_CONFIG_EXTRAS == {
        "dynaq",
        "dynaq.config",
        "dynaq.config.load",
        "dynaq.config.sections",
        "dynaq.errors",
    }
    assert loaded >= KNOWN_CONFIG_EXTRAS, (
        f"no longer loaded, delete from KNOWN_CONFIG_EXTRAS: {KNOWN_CONFIG_EXTRAS - loaded}"
    )
