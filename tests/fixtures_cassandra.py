"""Pytest plugin: one real Cassandra per test session, and a fresh store per test.

Load it from ``tests/conftest.py`` with ``pytest_plugins = ["tests.fixtures_cassandra"]``.
A missing Java or Cassandra install is a skip on a laptop and a failure in CI
(``CI=true``). Each test gets its own keyspace, so tests never see each other's
data while sharing the server.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import pytest

from dynaq.testing.servers import cassandra as cassandra_server
from dynaq.testing.servers.cassandra import CassandraServer

if TYPE_CHECKING:
    from dynaq.storage.cassandra import CassandraStore

_keyspaces = itertools.count(1)


@pytest.fixture(scope="session")
def cassandra(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CassandraServer]:
    """A single-node Cassandra on free 127.0.0.1 ports, for the whole session."""
    why = cassandra_server.available()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Cassandra unavailable in CI: {why}")
        pytest.skip(f"Cassandra unavailable: {why}")
    server = cassandra_server.start_cassandra(tmp_path_factory.mktemp("cassandra"))
    try:
        yield server
    finally:
        server.stop()


def new_keyspace() -> str:
    """A keyspace name no other test of this session uses."""
    return f"t{os.getpid()}_{next(_keyspaces)}"


@pytest.fixture
async def cassandra_store(cassandra: CassandraServer) -> AsyncIterator[CassandraStore]:
    """An open :class:`CassandraStore` on a fresh keyspace of the session's server."""
    from dynaq.storage.cassandra import CassandraStore

    store = CassandraStore([cassandra.host], keyspace=new_keyspace())
    await store.open()
    try:
        yield store
    finally:
        await store.close()
