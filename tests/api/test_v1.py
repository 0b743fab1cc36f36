"""Every v1 route of the contract, its status codes and bodies, and each error case."""

from __future__ import annotations

import io
import urllib.parse

import aiohttp
import pytest

from dynaq.clock import ManualClock
from dynaq.node import Node


async def _json(resp: aiohttp.ClientResponse) -> object:
    assert resp.content_type == "application/json", await resp.text()
    return await resp.json()


async def create_queue(http: aiohttp.ClientSession, name: str = "q1") -> None:
    async with http.put(f"/v1/queues/{name}") as r:
        assert r.status == 201


async def enqueue(http: aiohttp.ClientSession, body: bytes, queue: str = "q1") -> str:
    async with http.put(f"/v1/queues/{queue}/message", data=body) as r:
        assert r.status == 200
        assert r.content_type == "text/plain"
        return await r.text()


# status ---------------------------------------------------------------------------


async def test_health(http: aiohttp.ClientSession) -> None:
    async with http.get("/health") as r:
        assert r.status == 200
        assert (await r.json())["status"] == "serving"


async def test_status_servers_and_partitionrange(http: aiohttp.ClientSession, node: Node) -> None:
    async with http.get("/v1/status/servers") as r:
        assert r.status == 200
        assert r.content_type == "text/plain"
        assert (await r.text()).strip() == f"Member: test-node 127.0.0.1:{node.port}"
    async with http.get("/v1/status/partitionrange") as r:
        assert await _json(r) == {"bottom": "0", "top": str(2**63 - 1)}


# queues ---------------------------------------------------------------------------


async def test_queue_lifecycle(http: aiohttp.ClientSession) -> None:
    async with http.get("/v1/queues") as r:
        assert await _json(r) == {"queues": []}
    async with http.put("/v1/queues/q1") as r:
        assert r.status == 201
        assert await _json(r) == "created"
    async with http.put("/v1/queues/q1") as r:
        assert r.status == 422
        assert await _json(r) == {"error": "Queue already exists.", "code": "already_exists"}
    async with http.get("/v1/queues") as r:
        assert await _json(r) == {"queues": ["q1"]}
    async with http.get("/v1/queues/q1") as r:
        assert await _json(r) == {
            "VisibilityTimeout": 30,
            "MinPartitions": 1,
            "MaxPartitions": 10,
            "MaxPartitionAge": 432000,
            "CompressedMessages": False,
            "partitions": 1,
        }
    async with http.delete("/v1/queues/q1") as r:
        assert await _json(r) == {"Deleted": True}
    async with http.delete("/v1/queues/q1") as r:
        assert r.status == 404
        assert (await _json(r))["error"] == "Queue did not exist."  # type: ignore[index]
    async with http.get("/v1/queues/q1") as r:
        assert r.status == 404


@pytest.mark.parametrize("name", ["bad name", ".hidden", "x" * 81, "a/b", "-dash"])
async def test_invalid_queue_names(http: aiohttp.ClientSession, name: str) -> None:
    async with http.put(f"/v1/queues/{urllib.parse.quote(name, safe='')}") as r:
        assert r.status in (404, 422)  # "a/b" does not even match a route
        body = await _json(r)
        assert "error" in body  # type: ignore[operator]


async def test_invalid_queue_name_is_422_with_code(http: aiohttp.ClientSession) -> None:
    async with http.put("/v1/queues/bad%20name") as r:
        assert r.status == 422
        assert (await _json(r))["code"] == "invalid_name"  # type: ignore[index]


async def test_patch_applies_every_setting(http: aiohttp.ClientSession) -> None:
    await create_queue(http)
    patch = {
        "visibility_timeout": 2.5,
        "min_partitions": 2,
        "max_partitions": 20,
        "max_partition_age": 100,
        "compressed_messages": True,
    }
    async with http.patch("/v1/queues/q1", json=patch) as r:
        assert r.status == 200
        assert await _json(r) == "ok"
    async with http.get("/v1/queues/q1") as r:
        body = await _json(r)
    assert body == {
        "VisibilityTimeout": 2.5,
        "MinPartitions": 2,
        "MaxPartitions": 20,
        "MaxPartitionAge": 100,
        "CompressedMessages": True,
        "partitions": 2,  # min_partitions
    }


@pytest.mark.parametrize(
    "body",
    [
        b'{"visibility_timeout": "30"}',
        b'{"min_partitions": 1.5}',
        b'{"max_partitions": true}',
        b'{"compressed_messages": 1}',
        b'{"visibility_timeout": -1}',
        b'{"min_partitions": 5, "max_partitions": 2}',
        b'{"min_partitions": 0}',
        b'{"max_partitions": 0}',
        b'{"nope": 1}',
        b'{"fifo": true}',
        b'{"content_based_dedup": true}',
        b'{"tags": {"a": 1}}',
        b'{"tags": ["a"]}',
        b'{"tags": {"": "v"}}',
        b'{"tags": {"k": "' + b"v" * 257 + b'"}}',
        b'{"receive_wait_s": 21}',
        b'{"max_message_bytes": 10}',
        b'{"visibility_timeout": 1',
        b"[1, 2]",
        b"",
    ],
)
async def test_patch_rejects_bad_input(http: aiohttp.ClientSession, body: bytes) -> None:
    await create_queue(http)
    async with http.patch(
        "/v1/queues/q1", data=body, headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 422
        assert "error" in await _json(r)  # type: ignore[operator]
    async with http.get("/v1/queues/q1") as r:
        assert (await _json(r))["VisibilityTimeout"] == 30  # type: ignore[index]


async def test_patch_sets_what_sqs_attributes_set(http: aiohttp.ClientSession) -> None:
    """Every setting a definitions file restores: through v1 as through SQS."""
    settings = {"fifo": True, "content_based_dedup": True, "tags": {"team": "a"}}
    async with http.put("/v1/queues/q3", json=settings) as r:
        assert r.status == 201
    patch = {"receive_wait_s": 3, "max_message_bytes": 2048, "tags": {"team": "b"}, "fifo": True}
    async with http.patch("/v1/queues/q3", json=patch) as r:
        assert r.status == 200, await r.text()
    async with http.get("/v2/queues/q3") as r:
        got = await _json(r)
    assert isinstance(got, dict)
    assert (got["fifo"], got["content_based_dedup"], got["tags"]) == (True, True, {"team": "b"})
    assert (got["receive_wait_s"], got["max_message_bytes"]) == (3, 2048)
    async with http.patch("/v1/queues/q3", json={"fifo": False}) as r:
        assert r.status == 422
        assert "set when a queue is created" in (await r.text())


async def test_create_with_settings_applies_them_in_the_same_write(
    http: aiohttp.ClientSession,
) -> None:
    settings = {"visibility_timeout": 4, "min_partitions": 3, "compressed_messages": True}
    async with http.put("/v1/queues/q2", json=settings) as r:
        assert r.status == 201
        assert await _json(r) == "created"
    async with http.get("/v1/queues/q2") as r:
        body = await _json(r)
    assert body["VisibilityTimeout"] == 4 and body["MinPartitions"] == 3  # type: ignore[index]
    assert body["CompressedMessages"] is True  # type: ignore[index]


@pytest.mark.parametrize(
    "body", [b'{"visibility_timeout": "30"}', b'{"min_partitions": 0}', b'{"nope": 1}', b"[1]"]
)
async def test_create_with_bad_settings_creates_nothing(
    http: aiohttp.ClientSession, body: bytes
) -> None:
    async with http.put(
        "/v1/queues/q3", data=body, headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 422
        assert "error" in await _json(r)  # type: ignore[operator]
    async with http.get("/v1/queues/q3") as r:
        assert r.status == 404


async def test_patch_unknown_queue_is_404(http: aiohttp.ClientSession) -> None:
    async with http.patch("/v1/queues/nope", json={"visibility_timeout": 1}) as r:
        assert r.status == 404


# messages ------------------------------------------------------------------------


async def test_enqueue_receive_delete(http: aiohttp.ClientSession) -> None:
    await create_queue(http)
    mid = await enqueue(http, b"hello")
    assert mid.isdigit() and 0 <= int(mid) < 2**63
    async with http.get("/v1/queues/q1/messages/10") as r:
        assert await _json(r) == [{"id": mid, "body": "hello"}]
    async with http.get("/v1/queues/q1/messages/10") as r:
        assert await _json(r) == []  # in flight: invisible
    async with http.delete(f"/v1/queues/q1/message/{mid}") as r:
        assert await _json(r) is True
    async with http.delete(f"/v1/queues/q1/message/{mid}") as r:
        assert await _json(r) is False


async def test_non_utf8_body_goes_out_as_base64(http: aiohttp.ClientSession) -> None:
    await create_queue(http)
    mid = await enqueue(http, b"\xff\x00\xfe")
    async with http.get("/v1/queues/q1/messages/1") as r:
        assert await _json(r) == [{"id": mid, "body": "/wD+", "encoding": "base64"}]


async def test_empty_body_is_a_message(http: aiohttp.ClientSession) -> None:
    await create_queue(http)
    mid = await enqueue(http, b"")
    async with http.get("/v1/queues/q1/messages/1") as r:
        assert await _json(r) == [{"id": mid, "body": ""}]


async def test_enqueue_unknown_queue_is_404(http: aiohttp.ClientSession) -> None:
    async with http.put("/v1/queues/nope/message", data=b"x") as r:
        assert r.status == 404
        assert (await _json(r))["code"] == "queue_not_found"  # type: ignore[index]


async def test_oversize_message_is_413(http: aiohttp.ClientSession) -> None:
    await create_queue(http)
    async with http.put("/v1/queues/q1/message", data=b"x" * (256 * 1024 + 1)) as r:
        assert r.status == 413
        assert (await _json(r))["code"] == "payload_too_large"  # type: ignore[index]
    await enqueue(http, b"x" * (256 * 1024))  # exactly the limit is fine


async def test_request_over_max_request_size_is_413_json(http: aiohttp.ClientSession) -> None:
    await create_queue(http)
    big = io.BytesIO(b"x" * (17 * 1024 * 1024))
    async with http.put("/v1/queues/q1/message", data=big) as r:
        assert r.status == 413
        assert "error" in await _json(r)  # type: ignore[operator]


@pytest.mark.parametrize("size", ["0", "-1", "abc", "1.5", "1001", "99999999999999999999"])
async def test_bad_batch_size_is_422(http: aiohttp.ClientSession, size: str) -> None:
    await create_queue(http)
    async with http.get(f"/v1/queues/q1/messages/{size}") as r:
        assert r.status == 422
        assert (await _json(r))["code"] == "invalid_input"  # type: ignore[index]


async def test_receive_unknown_queue_is_404(http: aiohttp.ClientSession) -> None:
    async with http.get("/v1/queues/nope/messages/1") as r:
        assert r.status == 404


async def test_batch_receive_respects_size_and_serves_all(http: aiohttp.ClientSession) -> None:
    await create_queue(http)
    ids = {await enqueue(http, f"m{i}".encode()) for i in range(25)}
    seen: set[str] = set()
    for _ in range(10):
        async with http.get("/v1/queues/q1/messages/10") as r:
            batch = await _json(r)
        assert isinstance(batch, list) and len(batch) <= 10
        seen |= {m["id"] for m in batch}
        if seen == ids:
            break
    assert seen == ids


async def test_peek_does_not_lock(http: aiohttp.ClientSession) -> None:
    await create_queue(http)
    a = await enqueue(http, b"a")
    b = await enqueue(http, b"b")
    async with http.get(f"/v1/queues/q1/message/{a}%20{b}%20123") as r:
        body = await _json(r)
    assert body == {"messages": [{"id": a, "body": "a"}, {"id": b, "body": "b"}]}
    async with http.get("/v1/queues/q1/messages/10") as r:
        assert {m["id"] for m in await _json(r)} == {a, b}  # type: ignore[attr-defined]


@pytest.mark.parametrize("ids", ["abc", "-5", "9223372036854775808", "1.5", "%20"])
async def test_malformed_ids_are_422(http: aiohttp.ClientSession, ids: str) -> None:
    await create_queue(http)
    for method, path in (
        ("GET", f"/v1/queues/q1/message/{ids}"),
        ("DELETE", f"/v1/queues/q1/message/{ids}"),
        ("DELETE", f"/v1/queues/q1/messages/{ids}"),
    ):
        async with http.request(method, path) as r:
            assert r.status == 422, (method, path)
            assert "error" in await _json(r)  # type: ignore[operator]


async def test_message_routes_unknown_queue_are_404(http: aiohttp.ClientSession) -> None:
    for method, path in (
        ("GET", "/v1/queues/nope/message/1"),
        ("DELETE", "/v1/queues/nope/message/1"),
        ("DELETE", "/v1/queues/nope/messages/1,2"),
    ):
        async with http.request(method, path) as r:
            assert r.status == 404, (method, path)


async def test_multi_delete_counts_existing(http: aiohttp.ClientSession) -> None:
    await create_queue(http)
    a = await enqueue(http, b"a")
    b = await enqueue(http, b"b")
    async with http.delete(f"/v1/queues/q1/messages/{a},{b},42") as r:
        assert await _json(r) == {"deleted": 2}
    async with http.get("/v1/queues/q1/messages/10") as r:
        assert await _json(r) == []


async def test_compressed_queue_roundtrip(http: aiohttp.ClientSession, node: Node) -> None:
    await create_queue(http)
    plain = await enqueue(http, b"before" * 100)
    async with http.patch("/v1/queues/q1", json={"compressed_messages": True}) as r:
        assert r.status == 200
    packed = await enqueue(http, b"after" * 100)
    raw = await node.store.get(
        __import__("dynaq.core.keys", fromlist=["message"]).message(1, int(packed))
    )
    assert raw is not None and len(raw.value) < 100  # zlib made it small
    async with http.get(f"/v1/queues/q1/message/{plain}%20{packed}") as r:
        bodies = {m["id"]: m["body"] for m in (await _json(r))["messages"]}  # type: ignore[index]
    assert bodies == {plain: "before" * 100, packed: "after" * 100}


async def test_delete_queue_removes_its_messages(
    http: aiohttp.ClientSession, node: Node, clock: ManualClock
) -> None:
    await create_queue(http)
    for i in range(50):
        await enqueue(http, f"{i}".encode())
    async with http.delete("/v1/queues/q1") as r:
        assert r.status == 200
    await node.queues.wait_for_purges()
    assert await node.store.list_keys(b"m", 100) == []
    # Until every node's cache has dropped the old queue, the name stays taken
    # (as SQS asks for 60 s): no node can write into the old queue's number.
    async with http.put("/v1/queues/q1") as r:
        assert r.status == 409
        assert "created again in" in (await r.json())["error"]
    clock.advance(node.catalog.recreate_after_s)
    await create_queue(http)  # same name, fresh queue: no old messages
    async with http.get("/v1/queues/q1/messages/100") as r:
        assert await _json(r) == []


async def test_visibility_timeout_expiry(http: aiohttp.ClientSession, clock: ManualClock) -> None:
    await create_queue(http)
    async with http.patch("/v1/queues/q1", json={"visibility_timeout": 5}) as r:
        assert r.status == 200
    mid = await enqueue(http, b"x")
    async with http.get("/v1/queues/q1/messages/1") as r:
        assert len(await _json(r)) == 1  # type: ignore[arg-type]
    clock.advance(4.9)
    async with http.get("/v1/queues/q1/messages/1") as r:
        assert await _json(r) == []
    clock.advance(0.2)
    async with http.get("/v1/queues/q1/messages/1") as r:
        assert await _json(r) == [{"id": mid, "body": "x"}]  # at-least-once: served again


# topics ---------------------------------------------------------------------------


async def test_topic_lifecycle_and_fanout(http: aiohttp.ClientSession) -> None:
    async with http.get("/v1/topics") as r:
        assert await _json(r) == {"topics": []}
    async with http.put("/v1/topics/t1") as r:
        assert r.status == 201
        assert await _json(r) == {"Queues": []}
    async with http.put("/v1/topics/t1") as r:
        assert r.status == 422
        assert (await _json(r))["error"] == "Topic already exists."  # type: ignore[index]
    await create_queue(http, "a")
    await create_queue(http, "b")
    for q in ("a", "b", "a"):
        async with http.put(f"/v1/topics/t1/queues/{q}") as r:
            assert r.status == 200
    async with http.get("/v1/topics/t1") as r:
        assert await _json(r) == {"Queues": ["a", "b"]}
    async with http.put("/v1/topics/t1/message", data=b"fan") as r:
        ids = await _json(r)
    assert isinstance(ids, dict) and set(ids) == {"a", "b"}
    for q in ("a", "b"):
        async with http.get(f"/v1/queues/{q}/messages/5") as r:
            assert await _json(r) == [{"id": ids[q], "body": "fan"}]
    async with http.delete("/v1/topics/t1/queues/a") as r:
        assert await _json(r) == {"Queues": ["b"]}
    async with http.delete("/v1/topics/t1") as r:
        assert await _json(r) == {"Deleted": True}
    async with http.get("/v1/topics") as r:
        assert await _json(r) == {"topics": []}


async def test_topic_errors(http: aiohttp.ClientSession) -> None:
    async with http.get("/v1/topics/nope") as r:
        assert r.status == 404
        assert (await _json(r))["error"] == "Topic did not exist."  # type: ignore[index]
    async with http.delete("/v1/topics/nope") as r:
        assert r.status == 404
    async with http.put("/v1/topics/nope/message", data=b"x") as r:
        assert r.status == 404
    async with http.delete("/v1/topics/nope/queues/q") as r:
        assert r.status == 404
    async with http.put("/v1/topics/nope/queues/q") as r:
        assert r.status == 422
        assert (await _json(r))["error"] == "Topic does not exist. Please create it first."  # type: ignore[index]
    async with http.put("/v1/topics/t1") as r:
        assert r.status == 201
    async with http.put("/v1/topics/t1/queues/nope") as r:
        assert r.status == 422
        assert (await _json(r))["error"] == "Queue does not exist. Please create it first"  # type: ignore[index]
    async with http.put("/v1/topics/bad%20name") as r:
        assert r.status == 422


async def test_deleted_queue_leaves_its_topics(http: aiohttp.ClientSession) -> None:
    await create_queue(http, "a")
    async with http.put("/v1/topics/t1") as r:
        assert r.status == 201
    async with http.put("/v1/topics/t1/queues/a") as r:
        assert r.status == 200
    async with http.delete("/v1/queues/a") as r:
        assert r.status == 200
    async with http.get("/v1/topics/t1") as r:
        assert await _json(r) == {"Queues": []}
    async with http.put("/v1/topics/t1/message", data=b"x") as r:
        assert await _json(r) == {}


async def test_unknown_route_and_method_are_json(http: aiohttp.ClientSession) -> None:
    async with http.get("/v1/nothing") as r:
        assert r.status == 404
        assert "error" in await _json(r)  # type: ignore[operator]
    async with http.post("/v1/queues/q1") as r:
        assert r.status == 405
        assert "error" in await _json(r)  # type: ignore[operator]
