"""Topics with history: what is published is kept as a stream, listeners read it from
an index or a time, and a queue subscribed later gets it replayed (one node)."""

from __future__ import annotations

import base64
from typing import Any

import aiohttp

from dynaq.node import Node


async def _call(
    http: aiohttp.ClientSession, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    async with http.request(method, path, json=body) as r:
        return r.status, await r.json(content_type=None)


async def _bodies(http: aiohttp.ClientSession, queue: str) -> list[str]:
    body = {"max_messages": 100, "visibility_timeout_s": 600}
    status, out = await _call(http, "POST", f"/v2/queues/{queue}/messages/receive", body)
    assert status == 200
    return sorted(m["body"] for m in out["messages"])


async def _history(http: aiohttp.ClientSession, topic: str, query: str) -> list[dict[str, Any]]:
    async with http.get(f"/v2/streams/topic.{topic}?nowait=true&format=array&{query}") as r:
        if r.status == 204:
            return []
        assert r.status == 200, await r.text()
        return list(await r.json(content_type=None))


async def test_a_topic_keeps_its_history_and_replays_it_into_a_later_queue(
    http: aiohttp.ClientSession,
) -> None:
    assert (await _call(http, "PUT", "/v1/topics/orders"))[0] == 201
    assert (await _call(http, "PUT", "/v1/queues/early"))[0] == 201
    assert (await _call(http, "PUT", "/v1/topics/orders/queues/early"))[0] == 200
    before = [{"body": "not kept"}]
    assert (await _call(http, "POST", "/v2/topics/orders/messages", {"messages": before}))[0] == 200
    status, topic = await _call(http, "PATCH", "/v2/topics/orders", {"history": True})
    assert status == 200 and topic == {
        "name": "orders",
        "queues": ["early"],
        "history": True,
        "history_stream": "topic.orders",
    }
    msgs = [
        {"body": "a", "attributes": {"region": "eu-west"}},
        {"body": "b", "attributes": {"region": "us-east"}, "group": "g1"},
        {"body": "c", "attributes": {"region": "eu-north"}},
    ]
    status, _ = await _call(http, "POST", "/v2/topics/orders/messages", {"messages": msgs[:2]})
    assert status == 200
    status, _ = await _call(http, "POST", "/v2/topics/orders/messages", {"messages": msgs[2:]})
    assert status == 200

    kept = await _history(http, "orders", "i=0")
    assert [base64.b64decode(e["entry"]["body"]).decode() for e in kept] == ["a", "b", "c"]
    first = kept[0]["entry"]
    assert first["attributes"] == {"region": "eu-west"} and first["message_id"]
    assert kept[1]["entry"]["group"] == "g1"
    times = [e["order"] for e in kept]
    assert times == sorted(times) and times[0] == first["published_ms"]
    # Listeners read from an index or a time (the order key is the publish time).
    assert len(await _history(http, "orders", f"since={times[2]}")) >= 1

    # A queue subscribed later, with a filter: the replay applies it.
    assert (await _call(http, "PUT", "/v1/queues/late"))[0] == 201
    eu = {"filter_policy": {"region": [{"prefix": "eu-"}]}}
    assert (await _call(http, "PUT", "/v1/topics/orders/queues/late", eu))[0] == 200
    status, done = await _call(
        http, "POST", "/v2/topics/orders/replay", {"queue": "late", "from_index": 0}
    )
    assert status == 200 and done == {"read": 3, "enqueued": 2, "next_index": 3, "done": True}
    assert await _bodies(http, "late") == ["a", "c"]
    # Paged: max entries a call, and where to go on from.
    assert (await _call(http, "PUT", "/v1/queues/paged"))[0] == 201
    status, page = await _call(
        http, "POST", "/v2/topics/orders/replay", {"queue": "paged", "from_index": 1, "max": 1}
    )
    assert status == 200 and page == {"read": 1, "enqueued": 1, "next_index": 2, "done": False}
    assert await _bodies(http, "paged") == ["b"]
    # An unsubscribed queue gets everything, raw; by time.
    assert (await _call(http, "PUT", "/v1/queues/audit"))[0] == 201
    status, by_time = await _call(
        http, "POST", "/v2/topics/orders/replay", {"queue": "audit", "since_ms": times[0]}
    )
    assert status == 200 and by_time["read"] == 3

    # Off again: nothing more is kept, the history stays readable.
    status, topic = await _call(http, "PATCH", "/v2/topics/orders", {"history": False})
    assert status == 200 and topic["history"] is False
    assert (await _call(http, "POST", "/v2/topics/orders/messages", {"messages": before}))[0] == 200
    assert len(await _history(http, "orders", "i=0")) == 3


async def test_topic_history_refuses_bad_requests_with_4xx(http: aiohttp.ClientSession) -> None:
    assert (await _call(http, "PUT", "/v1/topics/t"))[0] == 201
    assert (await _call(http, "PUT", "/v1/queues/q"))[0] == 201
    for body in ({"history": "yes"}, {"history": True, "x": 1}, {}):
        status, err = await _call(http, "PATCH", "/v2/topics/t", body)
        assert status == 422 and err["code"] == "invalid_input", (body, err)
    status, err = await _call(http, "PATCH", "/v2/topics/nope", {"history": True})
    assert status == 404 and err["code"] == "topic_not_found"
    status, err = await _call(http, "POST", "/v2/topics/t/replay", {"queue": "q"})
    assert status == 404 and "no history" in err["error"]
    bad: list[dict[str, Any]] = [
        {},
        {"queue": "q", "from_index": -1},
        {"queue": "q", "from_index": 0, "since_ms": 0},
        {"queue": "q", "max": 0},
        {"queue": "q", "max": 100_001},
    ]
    for body in bad:
        status, err = await _call(http, "POST", "/v2/topics/t/replay", body)
        assert status == 422, (body, err)
    status, err = await _call(http, "POST", "/v2/topics/t/replay", {"queue": "missing"})
    assert status == 404 and err["code"] == "queue_not_found"


async def test_history_streams_are_reserved_and_only_read_through_the_streams_api(
    http: aiohttp.ClientSession,
) -> None:
    schema = {"schema": {"type": "object", "required": ["foo"]}}
    # Not declared before the topic keeps its history, nor in its place afterwards.
    status, err = await _call(http, "PUT", "/v2/streams/topic.kept", schema)
    assert status == 422 and err["code"] == "invalid_name" and "reserved" in err["error"]
    assert (await _call(http, "PUT", "/v1/topics/kept"))[0] == 201
    assert (await _call(http, "PATCH", "/v2/topics/kept", {"history": True}))[0] == 200
    one = {"messages": [{"body": "1"}]}
    assert (await _call(http, "POST", "/v2/topics/kept/messages", one))[0] == 200
    status, err = await _call(http, "DELETE", "/v2/streams/topic.kept")
    assert status == 422 and err["code"] == "invalid_name", err
    status, err = await _call(http, "PUT", "/v2/streams/topic.kept", schema)
    assert status == 422 and err["code"] == "invalid_name", err
    # Read like any stream, and publishing goes on.
    assert (await _call(http, "GET", "/v2/streams/topic.kept/schema"))[0] == 200
    assert (await _call(http, "POST", "/v2/topics/kept/messages", one))[0] == 200
    assert len(await _history(http, "kept", "i=0")) == 2
    # Other names with a dot stay free.
    assert (await _call(http, "PUT", "/v2/streams/topics.kept", schema))[0] == 201
    assert (await _call(http, "DELETE", "/v2/streams/topics.kept"))[0] == 204


async def test_history_is_not_switched_on_into_a_stream_of_another_schema(
    node: Node, http: aiohttp.ClientSession
) -> None:
    # As one declared through the streams API before its name was reserved.
    await node.streams.declare("topic.squat", {"type": "object", "required": ["foo"]}, None)
    assert (await _call(http, "PUT", "/v1/topics/squat"))[0] == 201
    assert (await _call(http, "PUT", "/v1/queues/sq"))[0] == 201
    assert (await _call(http, "PUT", "/v1/topics/squat/queues/sq"))[0] == 200
    status, err = await _call(http, "PATCH", "/v2/topics/squat", {"history": True})
    assert status == 409 and err["code"] == "schema_conflict", err
    status, topic = await _call(http, "GET", "/v2/topics/squat")
    assert status == 200 and topic["history"] is False
    one = {"messages": [{"body": "1"}]}
    assert (await _call(http, "POST", "/v2/topics/squat/messages", one))[0] == 200
    # Such a stream may be deleted; then the topic's history is kept in its own.
    assert (await _call(http, "DELETE", "/v2/streams/topic.squat"))[0] == 204
    assert (await _call(http, "PATCH", "/v2/topics/squat", {"history": True}))[0] == 200
    assert (await _call(http, "POST", "/v2/topics/squat/messages", one))[0] == 200
    kept = await _history(http, "squat", "i=0")
    assert [base64.b64decode(e["entry"]["body"]).decode() for e in kept] == ["1"]
    assert await _bodies(http, "sq") == ["1", "1"]
