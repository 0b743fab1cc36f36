"""The ring most cluster tests run on: 3 node processes on one Cassandra keyspace,
with HAProxy in front (a client never knows which node answers)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dynaq.testing.cluster import HaproxyProcess, LocalCluster, start_haproxy
from dynaq.testing.servers.cassandra import CassandraServer
from tests.fixtures.cassandra import new_keyspace
from tests.fixtures.nodes import require_haproxy

SYNC_S = 1.0
"""The nodes' config sync interval: a change made through one node reaches the others
within it."""


@pytest.fixture
def ring(
    tmp_path: Path, cassandra: CassandraServer
) -> Iterator[tuple[LocalCluster, HaproxyProcess]]:
    require_haproxy()
    cluster = LocalCluster(
        tmp_path,
        3,
        backend="cassandra",
        cassandra_hosts=[cassandra.host],
        keyspace=new_keyspace(),
        sync_interval_s=SYNC_S,
    )
    with cluster:
        lb = start_haproxy(tmp_path, [n.url.removeprefix("http://") for n in cluster.nodes])
        try:
            yield cluster, lb
        finally:
            lb.stop()
