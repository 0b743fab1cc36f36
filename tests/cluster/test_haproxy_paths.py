"""HAProxy's replay rules read the path as the node routes it, not as the client spelled it.

config/haproxy.cfg never sends a v1 enqueue/publish (``PUT .../message``) or a v1
receive (``GET .../messages/N``) twice. A node decodes every ``%XX`` once before
routing (``/v1/queues/jobs/%6Dessages/10`` is a receive there), so the balancer's
rules must match the same decoded path: these tests send percent-encoded spellings
through HAProxy to stand-in nodes that die mid-request (:mod:`tests.fixtures.standin`)
and count the copies; the last test asks a real node how it routes the same spellings.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynaq.node import Node
from dynaq.testing.cluster import HaproxyProcess, start_haproxy
from tests.fixtures.nodes import require_haproxy
from tests.fixtures.standin import StandIn


@pytest.fixture
def standins(tmp_path: Path) -> Iterator[tuple[list[StandIn], HaproxyProcess]]:
    require_haproxy()
    with contextlib.ExitStack() as stack:
        nodes = [stack.enter_context(StandIn(f"stand-in-{i}")) for i in (1, 2, 3)]
        lb = start_haproxy(tmp_path, [n.addr for n in nodes])
        stack.callback(lb.stop)
        yield nodes, lb


def _raw(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    """One request on a fresh connection, ``path`` sent byte for byte (no normalizing)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


# (method, path, what the node serves it as, may HAProxy send it again?)
# Bodiless: HAProxy retries only a request it holds whole, and a PUT without a
# body is one (an enqueue of an empty message, on a node).
SPELLINGS = [
    ("PUT", "/v1/queues/jobs/%6Dessage", "enqueue", False),
    ("PUT", "/v1/queues/jobs/%6dessage", "enqueue", False),  # lower-case hex
    ("PUT", "/v1/queues/jobs/messag%65", "enqueue", False),
    ("PUT", "/v1/%71ueues/jobs/message", "enqueue", False),
    ("PUT", "/v1/queues/%6Aobs/message", "enqueue", False),  # an encoded name
    ("PUT", "/v1/topics/events/%6D%65ssage", "publish", False),
    ("GET", "/v1/queues/jobs/%6Dessages/10", "receive", False),
    ("GET", "/v1/queues/jobs/%6dessages/1%30", "receive", False),
    ("GET", "/%76%31/queues/jobs/messages/10", "receive", False),
    # %2F stays inside its segment on the node: a queue called "jobs/x" (no such
    # queue can exist, but the route is a receive), and "jobs/messages" below is a
    # queue name, not two segments.
    ("GET", "/v1/queues/jobs%2Fx/messages/10", "receive", False),
    ("PUT", "/v1/queues/jobs%2fmessage", "create", True),
    # Decoded once, as the node does: %256D is the text "%6D" (a 404 there).
    ("GET", "/v1/queues/jobs/%256Dessages/10", "none", True),
    ("PUT", "/v1/queues/jobs/%256Dessage", "none", True),
    # Replay-safe routes spelled with escapes stay retried.
    ("PUT", "/v1/queues/%6Dessage", "create", True),  # creates the queue "message"
    ("GET", "/v1/queues/jobs/%6Dessage/10", "peek", True),
    ("DELETE", "/v1/queues/jobs/%6Dessage/10", "delete", True),
]


@pytest.mark.parametrize(("method", "path", "route", "replayable"), SPELLINGS)
def test_an_encoded_enqueue_or_receive_is_never_sent_twice(
    standins: tuple[list[StandIn], HaproxyProcess],
    method: str,
    path: str,
    route: str,
    replayable: bool,
) -> None:
    nodes, lb = standins
    status, _ = _raw(lb.port, method, path)
    assert status == 502, (method, path, status)  # every node "died" before answering
    sent = sum(n.count(method, path) for n in nodes)
    if replayable:
        assert sent > 1, f"{method} {path} ({route}) is safe to retry, but went out {sent} time(s)"
    else:
        assert sent == 1, f"{method} {path} ({route}) went out {sent} times: it could run twice"


@pytest.mark.parametrize(
    "path",
    ["/v1/queues/jobs/%6Dessage%", "/v1/queues/jobs/%zzmessage", "/v1/queues/jo%4/message"],
)
def test_a_path_that_does_not_decode_is_refused(
    standins: tuple[list[StandIn], HaproxyProcess], path: str
) -> None:
    """No rule can judge a path it cannot decode: it is a 400 and never reaches a node."""
    nodes, lb = standins
    status, body = _raw(lb.port, "PUT", path, b"x")
    assert status == 400, (path, status)
    assert json.loads(body)["code"] == "bad_request"
    assert not any(n.requests for n in nodes), [n.requests for n in nodes]


async def test_the_node_routes_these_spellings_as_the_balancer_assumes(node: Node) -> None:
    """Ties the table above to a real node: each spelling reaches the route named there."""

    def call(method: str, path: str) -> tuple[int, bytes]:
        return _raw(node.port, method, path)

    for setup in ("/v1/queues/jobs", "/v1/topics/events", "/v1/topics/events/queues/jobs"):
        assert (await asyncio.to_thread(call, "PUT", setup))[0] in (200, 201), setup
    for method, path, route, _ in SPELLINGS:
        status, body = await asyncio.to_thread(call, method, path)
        assert _served_as(route, status, body), (method, path, route, status, body[:200])


def _served_as(route: str, status: int, body: bytes) -> bool:
    """Whether a node's answer is that of ``route`` (``none``: no route took it)."""
    if route == "none":
        return status == 404 and b"Not Found" in body
    if route in ("create", "receive") and status in (404, 422):
        # The name holds a "/": refused as a name by the route itself.
        return b"Not Found" not in body and json.loads(body)["code"] != "http_error"
    if status not in (200, 201):
        return False
    answer = json.loads(body)
    if route == "enqueue":
        return isinstance(answer, int)
    if route == "publish":
        return isinstance(answer, dict) and "jobs" in answer
    if route == "receive":
        return isinstance(answer, list)
    if route == "peek":
        return isinstance(answer, dict) and "messages" in answer
    if route == "delete":
        return answer is False
    return route == "create" and answer == "created"
