"""The batch (v2) routes in JSON and msgpack, and their error cases."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import aiohttp
import msgpack
import pytest

from dynaq.clock import ManualClock

MP = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}


async def _create(http: aiohttp.ClientSession, name: str = "q1") -> None:
    async with http.put(f"/v1/queues/{name}") as r:
        assert r.status == 201


async def post_json(http: aiohttp.ClientSession, path: str, body: Any) -> tuple[int, Any]:
    async with http.post(path, json=body) as r:
        assert r.content_type == "application/json"
        return r.status, await r.json()


async def post_mp(http: aiohttp.ClientSession, path: str, body: Any) -> tuple[int, Any]:
    async with http.post(path, data=msgpack.packb(body), headers=MP) as r:
        assert r.content_type == "application/msgpack"
        return r.status, msgpack.unpackb(await r.read())


async def test_json_batch_roundtrip(http: aiohttp.ClientSession) -> None:
    await _create(http)
    msgs = [{"body": f"m{i}", "attributes": {"n": str(i)}} for i in range(100)]
    msgs.append({"body": base64.b64encode(b"\xff\x01").decode(), "encoding": "base64"})
    status, body = await post_json(http, "/v2/queues/q1/messages", {"messages": msgs})
    assert status == 200
    ids = body["ids"]
    assert len(ids) == 101 and all(isinstance(i, str) for i in ids)
    assert len(set(ids)) == 101
    status, body = await post_json(http, "/v2/queues/q1/messages/receive", {"max_messages": 1000})
    got = {m["id"]: m for m in body["messages"]}
    assert set(got) == set(ids)
    assert got[ids[5]]["body"] == "m5" and got[ids[5]]["attributes"] == {"n": "5"}
    assert got[ids[5]]["receive_count"] == 1
    assert len({m["receipt"] for m in got.values()}) == 101
    assert got[ids[100]] | {"enqueued_at_ms": 0, "receipt": "-"} == {
        "id": ids[100],
        "body": "/wE=",
        "encoding": "base64",
        "enqueued_at_ms": 0,
        "receive_count": 1,
        "receipt": "-",
    }
    status, body = await post_json(
        http, "/v2/queues/q1/messages/delete", {"ids": [*ids[:50], "123"]}
    )
    assert status == 200 and body["deleted"] == 50 and set(body["ids"]) == set(ids[:50])
    async with http.get("/v2/queues/q1") as r:
        d = await r.json()
    assert d["depth"] == 51 and d["in_flight"] == 51


async def test_msgpack_batch_roundtrip(http: aiohttp.ClientSession) -> None:
    await _create(http)
    bodies = [bytes([i]) * 256 for i in range(50)]
    status, body = await post_mp(
        http, "/v2/queues/q1/messages", {"messages": [{"body": b} for b in bodies]}
    )
    assert status == 200
    ids = body["ids"]
    assert all(isinstance(i, int) for i in ids)
    status, body = await post_mp(http, "/v2/queues/q1/messages/receive", {"max_messages": 50})
    assert sorted(m["body"] for m in body["messages"]) == sorted(bodies)
    status, body = await post_mp(http, "/v2/queues/q1/messages/delete", {"ids": ids})
    assert body["deleted"] == 50


async def test_change_visibility_extend_and_release(
    http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    await _create(http)
    _, body = await post_json(http, "/v2/queues/q1/messages", {"messages": [{"body": "a"}]})
    (mid,) = body["ids"]
    _, body = await post_json(
        http, "/v2/queues/q1/messages/receive", {"max_messages": 1, "visibility_timeout_s": 10}
    )
    assert [m["id"] for m in body["messages"]] == [mid]
    _, body = await post_json(
        http, "/v2/queues/q1/messages/visibility", {"ids": [mid], "visibility_timeout_s": 60}
    )
    assert body == {"changed": [mid]}
    clock.advance(30)  # past the original 10 s, within the extension
    _, body = await post_json(http, "/v2/queues/q1/messages/receive", {"max_messages": 1})
    assert body["messages"] == []
    _, body = await post_json(
        http, "/v2/queues/q1/messages/visibility", {"ids": [mid], "visibility_timeout_s": 0}
    )
    assert body == {"changed": [mid]}
    _, body = await post_json(http, "/v2/queues/q1/messages/receive", {"max_messages": 1})
    assert [(m["id"], m["receive_count"]) for m in body["messages"]] == [(mid, 2)]


async def test_topic_batch_publish(http: aiohttp.ClientSession) -> None:
    await _create(http, "a")
    await _create(http, "b")
    async with http.put("/v1/topics/t") as r:
        assert r.status == 201
    for q in ("a", "b"):
        async with http.put(f"/v1/topics/t/queues/{q}") as r:
            assert r.status == 200
    status, body = await post_mp(
        http, "/v2/topics/t/messages", {"messages": [{"body": b"x"}, {"body": b"y"}]}
    )
    assert status == 200 and set(body["ids"]) == {"a", "b"}
    for q in ("a", "b"):
        _, got = await post_mp(http, f"/v2/queues/{q}/messages/receive", {"max_messages": 10})
        assert sorted(m["body"] for m in got["messages"]) == [b"x", b"y"]


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v2/queues/q1/messages", {"messages": []}, 422),
        ("/v2/queues/q1/messages", {"messages": "x"}, 422),
        ("/v2/queues/q1/messages", {"messages": [{"body": 5}]}, 422),
        ("/v2/queues/q1/messages", {"messages": [{}]}, 422),
        ("/v2/queues/q1/messages", {"messages": [{"body": "@@", "encoding": "base64"}]}, 422),
        ("/v2/queues/q1/messages", {"messages": [{"body": "a", "encoding": "rot13"}]}, 422),
        ("/v2/queues/q1/messages", {"messages": [{"body": "a", "attributes": {"k": 1}}]}, 422),
        ("/v2/queues/q1/messages", {"messages": [{"body": "a"}] * 1001}, 422),
        # aws.types (the SQS/SNS data types a message carries) must be well formed:
        # the SQS and SNS views of the message read it.
        *(
            ("/v2/queues/q1/messages", {"messages": [{"body": "a", "attributes": a}]}, 422)
            for a in (
                {"aws.types": '{"x": "Binary"}', "x": "not-base64!"},
                {"aws.types": "not json", "x": "1"},
                {"aws.types": '["x"]', "x": "1"},
                {"aws.types": '{"x": "Float"}', "x": "1"},
                {"aws.types": '{"y": "Number"}', "x": "1"},
            )
        ),
        (
            "/v2/topics/t1/messages",
            {"messages": [{"body": "a", "attributes": {"aws.types": '{"x": 5}', "x": "1"}}]},
            422,
        ),
        ("/v2/queues/q1/messages", {"messages": [{"body": "a" * 262145}]}, 413),
        ("/v2/queues/q1/messages", [1], 422),
        ("/v2/queues/nope/messages", {"messages": [{"body": "a"}]}, 404),
        ("/v2/queues/q1/messages/receive", {"max_messages": 0}, 422),
        ("/v2/queues/q1/messages/receive", {"max_messages": "5"}, 422),
        ("/v2/queues/q1/messages/receive", {"max_messages": 1001}, 422),
        ("/v2/queues/q1/messages/receive", {"max_messages": 1, "visibility_timeout_s": -1}, 422),
        ("/v2/queues/q1/messages/receive", {"max_messages": 1, "visibility_timeout_s": "1"}, 422),
        ("/v2/queues/q1/messages/delete", {"ids": []}, 422),
        ("/v2/queues/q1/messages/delete", {"ids": ["x"]}, 422),
        ("/v2/queues/q1/messages/delete", {"ids": [-1]}, 422),
        ("/v2/queues/q1/messages/delete", {"ids": [2**63]}, 422),
        ("/v2/queues/q1/messages/delete", {"ids": [True]}, 422),
        ("/v2/queues/q1/messages/visibility", {"ids": ["1"]}, 422),
        ("/v2/queues/q1/messages/visibility", {"ids": ["1"], "visibility_timeout_s": 1e9}, 422),
        ("/v2/topics/nope/messages", {"messages": [{"body": "a"}]}, 404),
    ],
)
async def test_v2_errors(http: aiohttp.ClientSession, path: str, body: Any, status: int) -> None:
    await _create(http)
    if path.startswith("/v2/topics/t1"):
        async with http.put("/v1/topics/t1") as r:
            assert r.status in (201, 422)
    got, payload = await post_json(http, path, body)
    assert got == status, payload
    assert isinstance(payload["error"], str) and payload["code"]


async def test_v2_malformed_bodies(http: aiohttp.ClientSession) -> None:
    await _create(http)
    cases = [
        (b"{not json", "application/json", 422),
        (b"\xc1", "application/msgpack", 422),
        (b"<xml/>", "application/xml", 415),
    ]
    for data, ctype, status in cases:
        async with http.post(
            "/v2/queues/q1/messages", data=data, headers={"Content-Type": ctype}
        ) as r:
            assert r.status == status
            assert "error" in await r.json()


async def test_long_poll_returns_when_a_message_arrives(http: aiohttp.ClientSession) -> None:
    import asyncio
    import time

    await _create(http)

    async def later() -> None:
        await asyncio.sleep(0.3)
        async with http.post("/v2/queues/q1/messages", json={"messages": [{"body": "hi"}]}) as r:
            assert r.status == 200

    t0 = time.monotonic()
    sender = asyncio.create_task(later())
    status, body = await post_json(
        http, "/v2/queues/q1/messages/receive", {"max_messages": 5, "wait_time_s": 10}
    )
    await sender
    assert status == 200 and [m["body"] for m in body["messages"]] == ["hi"]
    assert 0.25 < time.monotonic() - t0 < 5


async def test_abandoned_long_poll_takes_nothing(http: aiohttp.ClientSession) -> None:
    """A client that hangs up during its long poll (its own timeout was shorter
    than the wait) leaves the next message visible for the next receive, instead
    of a poll nobody reads taking it for a whole visibility timeout."""
    await _create(http)
    poll = {"max_messages": 1, "wait_time_s": 5, "visibility_timeout_s": 600}
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(post_json(http, "/v2/queues/q1/messages/receive", poll), 0.3)
    await asyncio.sleep(0.2)  # the node sees the connection closed
    status, _ = await post_json(http, "/v2/queues/q1/messages", {"messages": [{"body": "x"}]})
    assert status == 200
    await asyncio.sleep(0.2)  # the abandoned poll wakes up (and must serve nothing)
    status, body = await post_json(http, "/v2/queues/q1/messages/receive", {"max_messages": 1})
    assert status == 200 and [m["body"] for m in body["messages"]] == ["x"]
    assert body["messages"][0]["receive_count"] == 1


async def test_long_poll_times_out_empty(http: aiohttp.ClientSession, clock: ManualClock) -> None:
    """The long poll's deadline is on the node's clock: it answers empty once the
    clock passes it, and not before."""
    await _create(http)
    poll = asyncio.create_task(
        post_json(http, "/v2/queues/q1/messages/receive", {"max_messages": 5, "wait_time_s": 0.4})
    )
    await asyncio.sleep(0.1)
    clock.advance(0.2)
    await asyncio.sleep(0.1)
    assert not poll.done()
    clock.advance(0.3)
    status, body = await asyncio.wait_for(poll, 5)
    assert status == 200 and body["messages"] == []
    status, _ = await post_json(
        http, "/v2/queues/q1/messages/receive", {"max_messages": 5, "wait_time_s": 21}
    )
    assert status == 422


async def test_well_formed_sqs_types_are_kept(http: aiohttp.ClientSession) -> None:
    """A message received through SQS carries its data types in ``aws.types``; sent
    back through v2 as received, it keeps them."""
    await _create(http, "typed")
    attrs = {"aws.types": '{"b": "Binary", "n": "Number.int"}', "b": "aGk=", "n": "5"}
    status, sent = await post_json(
        http, "/v2/queues/typed/messages", {"messages": [{"body": "a", "attributes": attrs}]}
    )
    assert status == 200, sent
    _, got = await post_json(http, "/v2/queues/typed/messages/receive", {"max_messages": 1})
    assert got["messages"][0]["attributes"] == attrs


async def test_receive_takes_a_run_of_a_group_with_max_per_group(
    http: aiohttp.ClientSession,
) -> None:
    await _create(http, "runs")
    msgs = [{"body": f"m{i}", "group": "g"} for i in range(4)]
    status, _ = await post_json(http, "/v2/queues/runs/messages", {"messages": msgs})
    assert status == 200
    path = "/v2/queues/runs/messages/receive"
    for bad in (0, 11, "2", True):
        status, body = await post_json(http, path, {"max_messages": 10, "max_per_group": bad})
        assert status == 422 and "max_per_group" in body["error"], bad
    status, body = await post_json(http, path, {"max_messages": 10, "max_per_group": 3})
    assert [m["body"] for m in body["messages"]] == ["m0", "m1", "m2"]
    status, body = await post_json(http, path, {"max_messages": 10, "max_per_group": 10})
    assert body["messages"] == []  # the group waits for its run
