"""Fixtures of the cluster tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dynaq.testing.cluster import HaproxyProcess, LocalCluster
from dynaq.testing.servers.cassandra import CassandraServer
from tests.fixtures.ring import ring_behind_haproxy


@pytest.fixture
def ring(
    tmp_path: Path, cassandra: CassandraServer
) -> Iterator[tuple[LocalCluster, HaproxyProcess]]:
    """3 nodes on one Cassandra keyspace behind HAProxy (see :mod:`tests.fixtures.ring`)."""
    with ring_behind_haproxy(tmp_path, cassandra) as ring:
        yield ring
