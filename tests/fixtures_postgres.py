"""Pytest plugin: one real PostgreSQL per test session, and a fresh database per test.

Load it from ``tests/conftest.py`` with ``pytest_plugins = ["tests.fixtures_postgres"]``.
A missing PostgreSQL install is a skip on a laptop and a failure in CI
(``CI=true``). Each test gets its own database, so tests never see each
other's outbox rows or advisory locks' effects while sharing the server.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Iterator

import pytest

from dynaq.testing.servers import postgres as pg_server
from dynaq.testing.servers.postgres import PgServer

_databases = itertools.count(1)
_server: PgServer | None = None


@pytest.fixture(scope="session")
def postgres() -> Iterator[PgServer]:
    """A throwaway PostgreSQL cluster on a free 127.0.0.1 port, for the whole session."""
    why = pg_server.available()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL unavailable in CI: {why}")
        pytest.skip(f"PostgreSQL unavailable: {why}")
    try:
        import asyncpg  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("asyncpg is not installed (pip install dynaq[outbox])")
        pytest.skip("asyncpg is not installed (pip install dynaq[outbox])")
    # Test modules may import this fixture as well as load the plugin; each
    # import is its own session fixture, so share one server between them.
    global _server
    if _server is None:
        _server = pg_server.start_postgres()
    try:
        yield _server
    finally:
        if _server is not None:
            _server.stop()
            _server = None


@pytest.fixture
async def pg_dsn(postgres: PgServer) -> AsyncIterator[str]:
    """The DSN of a database no other test of this session uses (dropped afterwards)."""
    import asyncpg

    name = f"t{os.getpid()}_{next(_databases)}"
    admin = await asyncpg.connect(postgres.dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield postgres.dsn.rsplit("/", 1)[0] + "/" + name
    finally:
        admin = await asyncpg.connect(postgres.dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
