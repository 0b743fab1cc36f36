"""HAProxy (Debian's package) in front of 3 real nodes, with config/haproxy.cfg.

Nodes here run on their own embedded stores, so these tests pin the
balancer's behaviour (round robin, health checks, failover without failed
requests); the API-through-HAProxy failover test on the shared Cassandra
store is in ``test_cluster_cassandra.py``. Stand-in nodes that die mid-request
(:mod:`tests.fixtures.standin`) pin which requests HAProxy sends again and
that it never forwards node-to-node routes.
"""

from __future__ import annotations

import contextlib
import http.client
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
from tests.fixtures.standin import StandIn


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


# What HAProxy sends again, and what it never forwards (stand-in nodes) -------------------


@pytest.fixture
def standins(tmp_path: Path) -> Iterator[tuple[list[StandIn], HaproxyProcess]]:
    require_haproxy()
    with contextlib.ExitStack() as stack:
        nodes = [stack.enter_context(StandIn(f"stand-in-{i}")) for i in (1, 2, 3)]
        lb = start_haproxy(tmp_path, [n.addr for n in nodes])
        stack.callback(lb.stop)
        yield nodes, lb


def _raw(
    lb: HaproxyProcess, method: str, path: str, body: bytes | None = None
) -> tuple[int, bytes]:
    """One request on a fresh connection, with ``path`` sent byte for byte (no normalizing)."""
    conn = http.client.HTTPConnection("127.0.0.1", lb.port, timeout=10)
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


# (method, path, body, may HAProxy send it again after the node died mid-request?)
REPLAYS = [
    ("POST", "/v2/queues/jobs/messages", b'{"messages":[{"body":"x"}]}', False),
    ("POST", "/v2/queues/jobs/messages/receive", b'{"max_messages":10}', False),
    ("POST", "/v2/queues/jobs/messages/delete", b'{"ids":["1"]}', False),
    ("POST", "/v2/topics/events/messages", b'{"messages":[{"body":"x"}]}', False),
    ("POST", "/api/v1/batch/exact/items/ack", b'{"batchItemIds":["1:1:0"]}', False),
    ("PUT", "/v1/queues/jobs/message", b"x", False),  # v1 enqueue
    ("PUT", "/v1/topics/events/message", b"x", False),  # v1 publish
    ("GET", "/v1/queues/jobs/messages/10", None, False),  # v1 receive: locks messages
    ("PATCH", "/v1/queues/jobs", b'{"visibility_timeout":5}', False),
    ("GET", "/v1/queues/jobs", None, True),
    ("GET", "/v1/queues/jobs/message/1", None, True),  # peek
    ("DELETE", "/v1/queues/jobs/message/1", None, True),
    ("PUT", "/v1/queues/jobs", None, True),  # create: a second try answers "exists"
    ("PUT", "/v1/queues/message", None, True),  # creates the queue "message": no enqueue
    ("PUT", "/v1/topics/events/queues/jobs", None, True),
]


def test_a_request_that_may_have_been_done_is_never_sent_twice(
    standins: tuple[list[StandIn], HaproxyProcess],
) -> None:
    nodes, lb = standins
    for method, path, body, replayable in REPLAYS:
        status, _ = _raw(lb, method, path, body)
        assert status == 502, (method, path, status)  # every node "died" before answering
        sent = sum(n.count(method, path) for n in nodes)
        if replayable:
            assert sent > 1, f"{method} {path} is safe to retry, but went out {sent} time(s)"
        else:
            assert sent == 1, f"{method} {path} went out {sent} times: it could run twice"


@pytest.mark.parametrize(
    "path",
    [
        "/internal/v1/hints",
        "/internal",
        "/INTERNAL/v1/hints",
        "/%69nternal/v1/hints",
        "/%49NTERNAL/v1/hints",
        "//internal/v1/hints",
        "/./internal/v1/hints",
        "/v1/../internal/v1/hints",
        "/%2e%2e/internal/v1/hints",
        "/%2Finternal/v1/hints",
    ],
)
def test_node_to_node_routes_are_never_forwarded(
    standins: tuple[list[StandIn], HaproxyProcess], path: str
) -> None:
    nodes, lb = standins
    status, body = _raw(lb, "POST", path, b"\x80")
    assert status in (400, 403), (path, status)
    assert json.loads(body)["code"] in ("forbidden", "bad_request")
    assert not any(n.requests for n in nodes), [n.requests for n in nodes]


def test_a_queue_called_internal_is_still_served(
    standins: tuple[list[StandIn], HaproxyProcess],
) -> None:
    nodes, lb = standins
    status, _ = _raw(lb, "PUT", "/v1/queues/internal/message", b"x")
    assert status == 502  # forwarded (and the stand-in died)
    assert sum(n.count("PUT", "/v1/queues/internal/message") for n in nodes) == 1


def test_a_slowly_trickled_request_head_is_cut_off_by_haproxy(
    balanced: tuple[LocalCluster, HaproxyProcess],
) -> None:
    """aiohttp has no header-read timeout; HAProxy's ``timeout http-request`` is that
    bound: a client that never finishes its request head gets a 408 and the connection
    closes, without reaching a node."""
    import socket

    _, lb = balanced
    host, _, port = lb.url.removeprefix("http://").rpartition(":")
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        t0 = time.monotonic()
        answer = s.recv(4096)
        waited = time.monotonic() - t0
    assert answer.startswith(b"HTTP/1.1 408") or answer == b"", answer[:80]
    assert 5 < waited < 15, waited
