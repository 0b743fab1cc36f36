"""HAProxy (Debian's package) in front of 3 real nodes, with config/haproxy.cfg.

Nodes here run on their own embedded stores, so these tests pin the
balancer's behaviour (round robin, health checks, failover without failed
requests); the API-through-HAProxy failover test on the shared Cassandra
store is in ``test_cluster_cassandra.py``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynaq.testing.cluster import (
    HaproxyProcess,
    LocalCluster,
    http_get,
    start_haproxy,
)
from tests.fixtures.nodes import require_haproxy


@pytest.fixture
def balanced(tmp_path: Path) -> Iterator[tuple[LocalCluster, HaproxyProcess]]:
    require_haproxy()
    with LocalCluster(tmp_path, 3) as cluster:
        lb = start_haproxy(tmp_path, [n.url.removeprefix("http://") for n in cluster.nodes])
        try:
            yield cluster, lb
        finally:
            lb.stop()


def _node_of_health(lb: HaproxyProcess) -> str:
    status, body = http_get(lb.url + "/health")
    assert status == 200, body
    return str(json.loads(body)["node"])


def test_round_robin_over_every_node(balanced: tuple[LocalCluster, HaproxyProcess]) -> None:
    _, lb = balanced
    hits = Counter(_node_of_health(lb) for _ in range(30))
    assert set(hits) == {"dynaq-1", "dynaq-2", "dynaq-3"}
    assert max(hits.values()) - min(hits.values()) <= 2
    status, body = http_get(lb.url + "/v1/status/servers")
    assert status == 200 and body.decode().count("Member:") == 3


def test_killed_and_draining_nodes_leave_the_rotation_without_failed_requests(
    balanced: tuple[LocalCluster, HaproxyProcess],
) -> None:
    cluster, lb = balanced
    cluster.node("dynaq-2").kill()
    failures = 0
    deadline = time.monotonic() + 4.0
    while time.monotonic() < deadline:  # bounded: ~4 s of requests through the kill
        status, _ = http_get(lb.url + "/v1/status/servers")
        failures += status != 200
        time.sleep(0.01)
    assert failures == 0  # connection failures were redispatched to live nodes
    assert set(_node_of_health(lb) for _ in range(10)) == {"dynaq-1", "dynaq-3"}
    assert cluster.node("dynaq-3").terminate() == 0  # graceful: drains, then exits
    assert {_node_of_health(lb) for _ in range(6)} == {"dynaq-1"}
