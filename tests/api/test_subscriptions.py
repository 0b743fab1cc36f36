"""Subscriptions with filter policies and enveloped delivery, on one node."""

from __future__ import annotations

import json
from typing import Any

import aiohttp


async def _call(
    http: aiohttp.ClientSession, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    async with http.request(method, path, json=body) as r:
        return r.status, await r.json()


async def _bodies(http: aiohttp.ClientSession, queue: str) -> list[str]:
    body = {"max_messages": 100}
    status, out = await _call(http, "POST", f"/v2/queues/{queue}/messages/receive", body)
    assert status == 200
    return sorted(m["body"] for m in out["messages"])


async def test_filter_policies_route_only_matching_messages(http: aiohttp.ClientSession) -> None:
    assert (await _call(http, "PUT", "/v1/topics/orders"))[0] == 201
    for q in ("big", "eu", "all", "env"):
        assert (await _call(http, "PUT", f"/v1/queues/{q}"))[0] == 201
    big = {"filter_policy": {"amount": [{"numeric": [">=", 100]}]}}
    eu = {"filter_policy": {"region": [{"prefix": "eu-"}], "kind": [{"anything-but": "test"}]}}
    assert (await _call(http, "PUT", "/v1/topics/orders/queues/big", big))[0] == 200
    assert (await _call(http, "PUT", "/v1/topics/orders/queues/eu", eu))[0] == 200
    assert (await _call(http, "PUT", "/v1/topics/orders/queues/all"))[0] == 200
    env = {"raw_delivery": False, "filter_policy": {"region": [{"exists": True}]}}
    status, topic = await _call(http, "PUT", "/v1/topics/orders/queues/env", env)
    assert status == 200 and topic["Queues"] == ["big", "eu", "all", "env"]
    assert topic["Subscriptions"]["env"] == {
        "filter_policy": {"region": [{"exists": True}]},
        "filter_scope": "attributes",
        "raw_delivery": False,
    }
    msgs: list[dict[str, Any]] = [
        {"body": "a", "attributes": {"amount": "250", "region": "eu-west", "kind": "real"}},
        {"body": "b", "attributes": {"amount": "20", "region": "eu-north", "kind": "test"}},
        {"body": "c", "attributes": {"amount": "100", "region": "us-east"}},
        {"body": "d"},
    ]
    status, out = await _call(http, "POST", "/v2/topics/orders/messages", {"messages": msgs})
    assert status == 200
    assert {q: len(ids) for q, ids in out["ids"].items()} == {"big": 2, "eu": 1, "all": 4, "env": 3}
    assert await _bodies(http, "big") == ["a", "c"]
    assert await _bodies(http, "eu") == ["a"]
    assert await _bodies(http, "all") == ["a", "b", "c", "d"]
    envelopes = [json.loads(b) for b in await _bodies(http, "env")]
    assert sorted(e["Message"] for e in envelopes) == ["a", "b", "c"]
    first = next(e for e in envelopes if e["Message"] == "a")
    assert first["Type"] == "Notification" and first["Topic"] == "orders"
    assert first["MessageAttributes"] == {
        k: {"Type": "String", "Value": v} for k, v in msgs[0]["attributes"].items()
    }
    assert first["TopicArn"] == "arn:aws:sns:us-east-1:000000000000:orders"
    assert len(first["MessageId"]) == 36 and first["Timestamp"].endswith("Z")
    # a publish nobody's policy matches reaches only the unfiltered queue
    only_y = {"filter_policy": {"x": ["y"]}}
    assert (await _call(http, "PUT", "/v1/topics/orders/queues/all", only_y))[0] == 200
    status, out = await _call(
        http, "POST", "/v2/topics/orders/messages", {"messages": [{"body": "z"}]}
    )
    assert status == 200 and out["ids"] == {}
    # re-subscribing without a body takes everything again; unsubscribing drops the options
    assert (await _call(http, "PUT", "/v1/topics/orders/queues/all"))[0] == 200
    assert (await _call(http, "DELETE", "/v1/topics/orders/queues/env"))[0] == 200
    _, topic = await _call(http, "GET", "/v1/topics/orders")
    assert set(topic["Subscriptions"]) == {"big", "eu"}


async def test_bad_subscription_options_are_422(http: aiohttp.ClientSession) -> None:
    assert (await _call(http, "PUT", "/v1/topics/t"))[0] == 201
    assert (await _call(http, "PUT", "/v1/queues/q"))[0] == 201
    bodies: list[Any] = [
        {"filter_policy": {}},
        {"filter_policy": {"a": [{"numeric": ["~", 1]}]}},
        {"filter_policy": "x"},
        {"raw_delivery": "no"},
        {"other": 1},
        [1],
    ]
    for body in bodies:
        status, err = await _call(http, "PUT", "/v1/topics/t/queues/q", body)
        assert status == 422 and err["code"] == "invalid_input", body
    _, topic = await _call(http, "GET", "/v1/topics/t")
    assert topic == {"Queues": []}


async def test_a_body_policy_routes_json_bodies_by_their_content(
    http: aiohttp.ClientSession,
) -> None:
    """``filter_scope: body``: the policy reads the JSON body (nested keys, arrays, a
    missing key); a body that is not a JSON object matches nothing; a policy that is
    wrong for its scope is a 422."""
    assert (await _call(http, "PUT", "/v1/topics/shop"))[0] == 201
    for q in ("eu-big", "no-coupon"):
        assert (await _call(http, "PUT", f"/v1/queues/{q}"))[0] == 201
    eu_big = {
        "filter_scope": "body",
        "filter_policy": {
            "order": {"total": [{"numeric": [">", 100]}], "region": [{"prefix": "eu-"}]}
        },
    }
    no_coupon = {"filter_scope": "body", "filter_policy": {"coupon": [{"exists": False}]}}
    assert (await _call(http, "PUT", "/v1/topics/shop/queues/eu-big", eu_big))[0] == 200
    status, topic = await _call(http, "PUT", "/v1/topics/shop/queues/no-coupon", no_coupon)
    assert status == 200 and topic["Subscriptions"]["no-coupon"]["filter_scope"] == "body"
    bodies = [
        {"order": {"total": 250, "region": "eu-west"}},
        {"order": {"total": 250, "region": "us-east"}, "coupon": "X1"},
        {"order": [{"total": 5, "region": "eu-north"}, {"total": 101, "region": "eu-x"}]},
        {"order": {"total": "250", "region": "eu-west"}, "coupon": None},
    ]
    msgs = [{"body": json.dumps(b)} for b in bodies] + [{"body": "not json"}, {"body": "[1]"}]
    status, _ = await _call(http, "POST", "/v2/topics/shop/messages", {"messages": msgs})
    assert status == 200
    got = {q: [json.loads(b) for b in await _bodies(http, q)] for q in ("eu-big", "no-coupon")}
    # The 4th: its total is a string (JSON types are kept: no numeric match), and its
    # coupon is null (present: not what exists:false matches).
    assert sorted(json.dumps(b) for b in got["eu-big"]) == sorted(
        json.dumps(b) for b in (bodies[0], bodies[2])
    )
    assert sorted(json.dumps(b) for b in got["no-coupon"]) == sorted(
        json.dumps(b) for b in (bodies[0], bodies[2])
    )
    bad: list[dict[str, Any]] = [
        {"filter_scope": "headers", "filter_policy": {"a": ["x"]}},
        {"filter_scope": "body", "filter_policy": {"a": {}}},
        {"filter_scope": "body", "filter_policy": {"a": {"b": {"c": {"d": {"e": {"f": ["x"]}}}}}}},
        {"filter_scope": "body", "filter_policy": {"a": {"b": [{"numeric": ["~", 1]}]}}},
        {"filter_policy": {"a": {"b": ["x"]}}},  # nested: a body policy, read as attributes
    ]
    for options in bad:
        status, err = await _call(http, "PUT", "/v1/topics/shop/queues/eu-big", options)
        assert status == 422 and err["code"] == "invalid_input", options


async def test_a_publish_keeps_each_queues_own_limits(http: aiohttp.ClientSession) -> None:
    """A topic's copy meets the queue's checks as a direct enqueue does: a FIFO queue
    takes no message without a group, a small queue no message over its size, and
    the publish is refused whole (no other subscriber gets a copy)."""
    await _call(http, "PUT", "/v1/queues/ff.fifo", {"fifo": True})
    await _call(http, "PUT", "/v1/queues/small", {"max_message_bytes": 1024})
    await _call(http, "PUT", "/v1/queues/wide")
    for topic, queue in (("tf", "ff.fifo"), ("tf", "wide"), ("ts", "small"), ("ts", "wide")):
        await _call(http, "PUT", f"/v1/topics/{topic}")
        await _call(http, "PUT", f"/v1/topics/{topic}/queues/{queue}")
    async with http.put("/v1/topics/tf/message", data=b"no group") as r:
        assert r.status == 422
        assert "ff.fifo" in (await r.json())["error"]
    async with http.put("/v1/topics/ts/message", data=b"b" * 2000) as r:
        assert r.status == 413
        assert "small" in (await r.json())["error"]
    async with http.put("/v1/topics/ts/message", data=b"b" * 1000) as r:
        assert r.status == 200
    assert await _bodies(http, "small") == ["b" * 1000]
    assert await _bodies(http, "wide") == ["b" * 1000]
