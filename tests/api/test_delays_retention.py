"""Delays (queue default and per message) and retention on one node (manual clock)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from dynaq.clock import ManualClock
from dynaq.node import Node


async def _call(
    http: aiohttp.ClientSession, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    async with http.request(method, path, json=body) as r:
        return r.status, await r.json()


async def _ids(http: aiohttp.ClientSession, queue: str) -> list[str]:
    body = {"max_messages": 100, "visibility_timeout_s": 600}
    status, out = await _call(http, "POST", f"/v2/queues/{queue}/messages/receive", body)
    assert status == 200
    return [m["id"] for m in out["messages"]]


async def _tick(clock: ManualClock, seconds: float) -> None:
    """Advance the node's clock in small steps, letting its movers run at each."""
    steps = max(1, round(seconds / 0.1))
    for _ in range(steps):
        clock.advance(seconds / steps)
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.05)


async def _eventually(
    http: aiohttp.ClientSession, clock: ManualClock, queue: str, extra_s: float = 0.6
) -> list[str]:
    """Receive until something comes, advancing the clock by at most ``extra_s`` (the
    movers run every 0.2 s of the node's clock); [] if nothing did."""
    waited = 0.0
    while True:
        got = await _ids(http, queue)
        if got or waited >= extra_s:
            return got
        clock.advance(0.05)
        waited += 0.05
        await asyncio.sleep(0.02)


async def test_settings_are_checked_and_shown(http: aiohttp.ClientSession) -> None:
    assert (await _call(http, "PUT", "/v1/queues/q"))[0] == 201
    _, desc = await _call(http, "GET", "/v2/queues/q")
    assert desc["delay_s"] == 0 and desc["retention_s"] == 4 * 86_400
    for patch in (
        {"delay_s": 901},
        {"delay_s": -1},
        {"delay_s": "5"},
        {"retention_s": 59},
        {"retention_s": 14 * 86_400 + 1},
        {"retention_s": True},
    ):
        status, err = await _call(http, "PATCH", "/v1/queues/q", patch)
        assert status == 422 and err["code"] == "invalid_input", patch
    patch = {"delay_s": 30, "retention_s": 120}
    assert await _call(http, "PATCH", "/v1/queues/q", patch) == (200, "ok")
    _, desc = await _call(http, "GET", "/v2/queues/q")
    assert desc["delay_s"] == 30 and desc["retention_s"] == 120
    for msg in (
        {"body": "x", "delay_s": 901},
        {"body": "x", "delay_s": "1"},
        {"body": "x", "delay_s": -0.5},
        {"body": "x", "group": "g", "delay_s": 1},
    ):
        status, err = await _call(http, "POST", "/v2/queues/q/messages", {"messages": [msg]})
        assert status == 422 and err["code"] == "invalid_input", msg


async def test_delayed_messages_are_never_served_early(
    http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    assert (await _call(http, "PUT", "/v1/queues/d"))[0] == 201
    msgs = [{"body": "now"}, {"body": "later", "delay_s": 10}, {"body": "soon", "delay_s": 2.5}]
    _, out = await _call(http, "POST", "/v2/queues/d/messages", {"messages": msgs})
    now_id, later_id, soon_id = out["ids"]
    assert await _ids(http, "d") == [now_id]
    await _tick(clock, 2.4)
    assert await _ids(http, "d") == []  # 2.4 s: not yet
    await _tick(clock, 0.2)
    assert await _eventually(http, clock, "d") == [soon_id]
    await _tick(clock, 9.8 - 2.6 - 0.6)  # at most 9.8 s
    assert await _ids(http, "d") == []
    await _tick(clock, 0.8)
    assert await _eventually(http, clock, "d") == [later_id]  # it kept the id drawn at its enqueue


async def test_queue_default_delay_applies_and_a_message_may_opt_out(
    http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    assert (await _call(http, "PUT", "/v1/queues/dd"))[0] == 201
    assert await _call(http, "PATCH", "/v1/queues/dd", {"delay_s": 5}) == (200, "ok")
    msgs = [{"body": "a"}, {"body": "b", "delay_s": 0}, {"body": "g", "group": "g"}]
    _, out = await _call(http, "POST", "/v2/queues/dd/messages", {"messages": msgs})
    a, b, g = out["ids"]
    assert await _ids(http, "dd") == [b]
    await _tick(clock, 4.8)
    assert await _ids(http, "dd") == []
    await _tick(clock, 0.3)
    got = await _eventually(http, clock, "dd")
    if len(got) < 2:
        got += await _eventually(http, clock, "dd")
    assert sorted(got) == sorted([a, g])


async def test_retention_removes_exactly_the_expired_messages(
    node: Node, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    assert (await _call(http, "PUT", "/v1/queues/r"))[0] == 201
    assert await _call(http, "PATCH", "/v1/queues/r", {"retention_s": 60}) == (200, "ok")
    msgs = [{"body": f"old{i}"} for i in range(30)] + [{"body": "g", "group": "x"}]
    _, old = await _call(http, "POST", "/v2/queues/r/messages", {"messages": msgs})
    clock.advance(30)
    _, new = await _call(http, "POST", "/v2/queues/r/messages", {"messages": [{"body": "new"}]})
    clock.advance(30.5)  # the first 31 are 60.5 s old, the last 30.5 s
    await node.queues.retention.sweep()  # (the periodic sweep may have run first)
    assert await _ids(http, "r") == new["ids"]
    _, peeked = await _call(http, "GET", f"/v1/queues/r/message/{old['ids'][0]}")
    assert peeked == {"messages": []}
    assert (await _call(http, "GET", "/v2/queues/r"))[1]["depth"] == 1
    assert await node.queues.retention.sweep() == 0


async def test_queue_statistics(
    http: aiohttp.ClientSession, clock: ManualClock, node: Node
) -> None:
    for q in ("st", "st-dlq"):
        assert (await _call(http, "PUT", f"/v1/queues/{q}"))[0] == 201
    policy = {"dead_letter_queue": "st-dlq", "max_receive_count": 1}
    assert (await _call(http, "PATCH", "/v1/queues/st", {"redrive_policy": policy}))[0] == 200
    msgs = [{"body": f"m{i}"} for i in range(5)] + [{"body": "d", "delay_s": 60}]
    assert (await _call(http, "POST", "/v2/queues/st/messages", {"messages": msgs}))[0] == 200
    clock.advance(3)
    body = {"max_messages": 2, "visibility_timeout_s": 5}
    _, got = await _call(http, "POST", "/v2/queues/st/messages/receive", body)
    assert len(got["messages"]) == 2
    await node.queues.statistics.refresh()  # the background refresh, run now
    _, desc = await _call(http, "GET", "/v2/queues/st")
    figures = {k: desc[k] for k in ("visible", "in_flight", "delayed", "dead_lettered")}
    assert figures == {"visible": 3, "in_flight": 2, "delayed": 1, "dead_lettered": 0}
    assert 3.0 <= desc["oldest_age_s"] <= 4.0
    assert desc["stats_nodes"] == 1 and desc["stats_age_s"] < 1 and desc["stats_capped"] is False
    await _tick(clock, 5.5)  # the two in flight expire; the next receive dead-letters them
    _, got = await _call(http, "POST", "/v2/queues/st/messages/receive", {"max_messages": 10})
    await _tick(clock, 0.5)  # the move to the dead-letter queue lands
    await node.queues.statistics.refresh()
    _, desc = await _call(http, "GET", "/v2/queues/st")
    assert desc["dead_lettered"] == 2 and desc["visible"] + desc["in_flight"] == 3


async def test_an_expired_batch_item_fails_and_its_batch_completes(
    node: Node, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    exact = "/api/v1/batch/exact"
    assert (await _call(http, "PUT", "/v1/queues/rb"))[0] == 201
    assert await _call(http, "PATCH", "/v1/queues/rb", {"retention_s": 60}) == (200, "ok")
    _, opened = await _call(http, "POST", exact, {})
    batch = opened["batchId"]
    _, added = await _call(http, "POST", f"{exact}/items", {"batchId": batch, "items": 2})
    [block] = added["batchItemGroupIds"]
    items = [f"{batch}:{block['id']}:{i}" for i in range(2)]
    msgs = [{"body": f"b{i}", "attributes": {"dynaq.batch_item": it}} for i, it in enumerate(items)]
    _, sent = await _call(http, "POST", "/v2/queues/rb/messages", {"messages": msgs})
    assert (await _call(http, "POST", f"{exact}/close/{batch}"))[1] == {"isComplete": False}
    ack = {"ids": sent["ids"][:1]}
    assert (await _call(http, "POST", "/v2/queues/rb/messages/delete", ack))[0] == 200
    clock.advance(61)  # the other one expires unacked
    await node.queues.retention.sweep()
    _, desc = await _call(http, "GET", f"{exact}/{batch}")
    assert desc["isComplete"] is True and desc["pending"] == 0
    assert [(f["item"], f["reason"]) for f in desc["failedItems"]] == [(items[1], "expired")]
