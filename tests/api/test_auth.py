"""Bearer tokens on a node: 401 without a good one, 403 without the permission, /health open.

The route table (dynaq.api.auth.ROUTES) is checked against the real router
twice: every route is classified, and every classified route refuses a token
that lacks what it needs and admits one that has it.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dynaq.api.auth import ANY_TOKEN, OPEN, ROUTES
from dynaq.clock import ManualClock
from dynaq.node import Node
from tests.fixtures.nodes import node_config

ADMIN = "admin-token-0123456789"
READER = "reader-token-0123456789"
WRITER = "writer-token-0123456789"
PUBLISHER = "publisher-token-01234567"
BATCHER = "batcher-token-012345678"
NOBODY = "nobody-token-0123456789"  # valid, but grants nothing on these resources
JOBS_ADMIN = "jobs-admin-token-0123456"
TOKENS = [
    f"ops:{ADMIN}:admin=*",
    f"reader:{READER}:read=queue/jobs-*",
    f"writer:{WRITER}:write=queue/jobs-*",
    f"publisher:{PUBLISHER}:write=topic/events",
    f"batcher:{BATCHER}:read+write=batch/exact",
    f"nobody:{NOBODY}:read=queue/elsewhere-*",
    f"jobs-admin:{JOBS_ADMIN}:admin=queue/jobs-*",
]


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(node_config(tmp_path, auth={"tokens": TOKENS}), clock=ManualClock())
    await n.start()
    try:
        yield n
    finally:
        await n.stop()


@pytest.fixture
async def http(node: Node) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{node.port}") as s:
        yield s


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_health_is_open(http: aiohttp.ClientSession) -> None:
    async with http.get("/health") as r:
        assert r.status == 200


@pytest.mark.parametrize(
    "headers",
    [{}, bearer("not-a-token-at-all"), {"Authorization": f"Basic {ADMIN}"}, bearer("")],
)
async def test_missing_or_unknown_tokens_are_401_with_a_challenge(
    http: aiohttp.ClientSession, headers: dict[str, str]
) -> None:
    async with http.get("/v1/queues", headers=headers) as r:
        assert r.status == 401
        assert r.headers["WWW-Authenticate"].startswith("Bearer realm=")
        body = await r.json()
        assert body["code"] == "unauthorized" and body["error"]
        assert ADMIN not in body["error"]


async def test_unknown_routes_need_a_token_before_they_are_404(
    http: aiohttp.ClientSession,
) -> None:
    async with http.get("/no/such/route") as r:
        assert r.status == 401
    async with http.get("/no/such/route", headers=bearer(NOBODY)) as r:
        assert r.status == 404


async def test_the_permission_matrix(http: aiohttp.ClientSession) -> None:
    async def status(method: str, path: str, token: str, **kw: object) -> int:
        async with http.request(method, path, headers=bearer(token), **kw) as r:  # type: ignore[arg-type]
            return r.status

    # admin creates; nobody else may
    assert await status("PUT", "/v1/queues/jobs-1", READER) == 403
    assert await status("PUT", "/v1/queues/jobs-1", WRITER) == 403
    assert await status("PUT", "/v1/queues/jobs-1", ADMIN) == 201
    assert await status("PUT", "/v1/queues/other-1", ADMIN) == 201
    # the writer enqueues into jobs-*, but cannot receive
    assert await status("PUT", "/v1/queues/jobs-1/message", WRITER, data=b"hi") == 200
    assert await status("GET", "/v1/queues/jobs-1/messages/1", WRITER) == 403
    assert await status("PUT", "/v1/queues/other-1/message", WRITER, data=b"hi") == 403
    # the reader receives from jobs-1, but cannot enqueue, delete or touch other-1
    async with http.get("/v1/queues/jobs-1/messages/10", headers=bearer(READER)) as r:
        assert r.status == 200
        (message,) = await r.json()
    assert await status("PUT", "/v1/queues/jobs-1/message", READER, data=b"x") == 403
    assert await status("POST", "/v2/queues/jobs-1/messages", READER, json={}) == 403
    assert await status("DELETE", f"/v1/queues/jobs-1/message/{message['id']}", READER) == 403
    assert await status("GET", "/v1/queues/other-1/messages/1", READER) == 403
    # ... and may not change settings: that is admin
    assert await status("PATCH", "/v1/queues/jobs-1", READER, json={}) == 403
    assert await status("DELETE", "/v1/queues/jobs-1", WRITER) == 403
    # listings need any valid token
    assert await status("GET", "/v1/queues", NOBODY) == 200


async def test_a_dead_letter_queue_needs_write_on_it(http: aiohttp.ClientSession) -> None:
    """Setting a redrive policy sends the queue's failed messages into the dead-letter
    queue it names: admin on the queue alone does not let a token name a queue it may
    not write to, whether it creates the queue with it or changes it later."""

    async def status(method: str, path: str, token: str, body: object = None) -> int:
        async with http.request(method, path, headers=bearer(token), json=body) as r:
            return r.status

    def policy(dlq: str) -> dict[str, object]:
        return {"redrive_policy": {"dead_letter_queue": dlq, "max_receive_count": 1}}

    assert await status("PUT", "/v1/queues/secret-dlq", ADMIN) == 201
    assert await status("PUT", "/v1/queues/jobs-dlq", ADMIN) == 201
    assert await status("PUT", "/v1/queues/jobs-p", JOBS_ADMIN, policy("secret-dlq")) == 403
    assert await status("GET", "/v1/queues/jobs-p", ADMIN) == 404  # nothing created
    assert await status("PUT", "/v1/queues/jobs-p", JOBS_ADMIN, policy("jobs-dlq")) == 201
    assert await status("PATCH", "/v1/queues/jobs-p", JOBS_ADMIN, policy("secret-dlq")) == 403
    assert await status("PATCH", "/v1/queues/jobs-p", JOBS_ADMIN, {"redrive_policy": None}) == 200
    async with http.get("/v2/queues/jobs-p", headers=bearer(ADMIN)) as r:
        assert (await r.json())["redrive_policy"] is None


async def test_topics_and_subscriptions(http: aiohttp.ClientSession) -> None:
    async def status(method: str, path: str, token: str, data: bytes | None = None) -> int:
        async with http.request(method, path, headers=bearer(token), data=data) as r:
            return r.status

    assert await status("PUT", "/v1/topics/events", PUBLISHER) == 403
    assert await status("PUT", "/v1/topics/events", ADMIN) == 201
    assert await status("PUT", "/v1/queues/jobs-9", ADMIN) == 201
    assert await status("PUT", "/v1/topics/events/queues/jobs-9", PUBLISHER) == 403
    assert await status("PUT", "/v1/topics/events/queues/jobs-9", ADMIN) == 200
    assert await status("PUT", "/v1/topics/events/message", PUBLISHER, b"e") == 200
    assert await status("PUT", "/v1/topics/events/message", WRITER, b"e") == 403
    # publishing fans out to jobs-9, which the reader may then receive
    async with http.get("/v1/queues/jobs-9/messages/10", headers=bearer(READER)) as r:
        assert [m["body"] for m in await r.json()] == ["e"]


async def test_batches_are_named_by_mode(http: aiohttp.ClientSession) -> None:
    async with http.post("/api/v1/batch/exact", headers=bearer(BATCHER), json={}) as r:
        assert r.status == 200
        batch_id = (await r.json())["batchId"]
    async with http.post("/api/v1/batch/estimated", headers=bearer(BATCHER), json={}) as r:
        assert r.status == 403
    async with http.get(f"/api/v1/batch/exact/{batch_id}", headers=bearer(BATCHER)) as r:
        assert r.status == 200
    async with http.delete(f"/api/v1/batch/exact/{batch_id}", headers=bearer(BATCHER)) as r:
        assert r.status == 403  # removal is admin
    async with http.delete(f"/api/v1/batch/exact/{batch_id}", headers=bearer(ADMIN)) as r:
        assert r.status == 200


def _routes(node: Node) -> set[tuple[str, str]]:
    found = set()
    for route in node.app.router.routes():
        if route.method == "HEAD" or route.resource is None:
            continue
        found.add((route.method, route.resource.canonical))
    return found


def test_every_route_is_classified(tmp_path: Path) -> None:
    routes = _routes(Node(node_config(tmp_path)))
    internal = {r for r in routes if r[1].startswith("/internal/")}
    assert internal, "the node-to-node routes are guarded by the peer MAC instead"
    unlisted = routes - internal - set(ROUTES)
    assert not unlisted, f"say in dynaq/api/auth.py ROUTES what these need: {sorted(unlisted)}"
    assert not set(ROUTES) - routes, "ROUTES lists routes that no longer exist"


def _concrete(canonical: str) -> str:
    """A path that routes to ``canonical``, with names the test tokens are scoped to."""
    values = {"queue": "jobs-1", "topic": "events", "batch_id": "1", "batch_size": "1"}
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m[1], "1"), canonical)


@pytest.mark.parametrize(("method", "canonical"), sorted(ROUTES))
async def test_each_route_refuses_a_token_without_its_permission(
    http: aiohttp.ClientSession, method: str, canonical: str
) -> None:
    path = _concrete(canonical)
    async with http.request(method, path, headers=bearer(NOBODY)) as r:
        needs = ROUTES[(method, canonical)]
        if needs is OPEN or needs == ANY_TOKEN:
            assert r.status not in (401, 403), (method, path)
        else:
            assert r.status == 403, (method, path, r.status)
            assert (await r.json())["code"] == "forbidden"
    async with http.request(method, path, headers=bearer(ADMIN)) as r:
        assert r.status not in (401, 403), (method, path)


async def test_tagging_a_message_with_a_batch_item_needs_batch_write(
    http: aiohttp.ClientSession,
) -> None:
    """Deleting a tagged message acks its item: a queue writer without batch write
    must not complete somebody's batch that way (v1 query, header, v2 attribute)."""
    async with http.put("/v1/queues/jobs-1", headers=bearer(ADMIN)) as r:
        assert r.status == 201
    item = "1:00000000-0000-0000-0000-000000000000:0"
    tagged: list[tuple[str, str, dict[str, Any]]] = [
        ("put", "/v1/queues/jobs-1/message", {"params": {"batch_item_id": item}, "data": b"x"}),
        (
            "put",
            "/v1/queues/jobs-1/message",
            {"headers": {"X-Dynaq-Batch-Item": item}, "data": b"x"},
        ),
        (
            "post",
            "/v2/queues/jobs-1/messages",
            {"json": {"messages": [{"body": "x", "attributes": {"dynaq.batch_item": item}}]}},
        ),
    ]
    for method, path, kw in tagged:
        headers = {**bearer(WRITER), **kw.pop("headers", {})}
        async with http.request(method, path, headers=headers, **kw) as r:
            assert r.status == 403, (path, await r.text())
            assert (await r.json())["code"] == "forbidden"
    # Untagged, the same writer may send; with batch write too, tagged is fine.
    async with http.put("/v1/queues/jobs-1/message", headers=bearer(WRITER), data=b"x") as r:
        assert r.status == 200
    async with http.put(
        "/v1/queues/jobs-1/message",
        headers=bearer(ADMIN),
        params={"batch_item_id": item},
        data=b"x",
    ) as r:
        assert r.status == 200
