"""The suite's fixtures live in ``tests/fixtures/`` and are loaded here as plugins.

Test modules import helpers from ``tests.fixtures.*`` when they need them
(``node_config``, ``new_keyspace``); nothing imports this file.
"""

from __future__ import annotations

pytest_plugins = [
    "tests.fixtures.blocking",
    "tests.fixtures.nodes",
    "tests.fixtures.cassandra",
    "tests.fixtures.postgres",
    "tests.fixtures.riak",
    "tests.fixtures.spark",
    "tests.fixtures.tls",
]


def pytest_unconfigure() -> None:
    """Tests run kinship in this process: its thread outlives their nodes, and a log
    record it routes into Python while the interpreter finalizes can crash the
    session's exit (``dynaq.cluster.kinship_quirks``, quirk 1)."""
    import sys

    if "kinship" in sys.modules:
        from dynaq.cluster.kinship_quirks import stop_routing_logs

        stop_routing_logs()
