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
