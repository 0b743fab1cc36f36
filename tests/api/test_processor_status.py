"""Processor status: workers' reports are kept, listed with age, liveness and lag,
and refused with precise 4xx errors when malformed."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from dynaq.clock import ManualClock
from dynaq.node import Node


def _report(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "graph": "pipeline",
        "kind": "join",
        "strategy": "exactly_once",
        "state": "running",
        "worker": "host-1/4242",
        "inputs": [
            {"name": "a", "kind": "stream", "position": 40, "lag": 2},
            {"name": "b", "kind": "stream", "position": 41, "lag": 3},
            {"name": "jobs", "kind": "queue", "position": None, "lag": None},
        ],
        "outputs": ["joined"],
        "error": "ConnectionResetError: the node went away",
        "attempts": 45,
        "delivered": 40,
        "handled_errors": 1,
        "last_delivery_ms": 1_700_000_000_000,
        "interval_s": 2,
    }
    body.update(over)
    return body


async def _call(
    http: aiohttp.ClientSession, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    async with http.request(method, path, json=body) as r:
        return r.status, await r.json(content_type=None)


async def test_a_report_is_listed_with_its_lag_and_liveness(
    http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    assert await _call(http, "GET", "/v2/processors") == (200, {"processors": []})
    status, shown = await _call(http, "PUT", "/v2/processors/pipeline.join", _report())
    assert status == 200, shown
    assert shown["lag"] == 5 and shown["alive"] is True and shown["age_s"] == 0
    assert shown["inputs"][2] == {"name": "jobs", "kind": "queue", "position": None, "lag": None}
    status, listed = await _call(http, "GET", "/v2/processors")
    assert status == 200
    assert [p["name"] for p in listed["processors"]] == ["pipeline.join"]
    assert listed["processors"][0]["attempts"] == 45
    clock.advance(7)  # more than three report intervals without a report
    _, one = await _call(http, "GET", "/v2/processors/pipeline.join")
    assert one["alive"] is False and one["age_s"] >= 7
    # A newer report replaces the old one.
    await _call(http, "PUT", "/v2/processors/pipeline.join", _report(attempts=50, state="stopped"))
    _, one = await _call(http, "GET", "/v2/processors/pipeline.join")
    assert one["attempts"] == 50 and one["alive"] is False  # stopped is never alive
    assert await _call(http, "DELETE", "/v2/processors/pipeline.join") == (200, {"deleted": True})
    status, err = await _call(http, "GET", "/v2/processors/pipeline.join")
    assert status == 404 and err["code"] == "processor_not_found"
    status, err = await _call(http, "DELETE", "/v2/processors/pipeline.join")
    assert status == 404 and err["code"] == "processor_not_found"


async def test_reports_survive_a_node_restart(node: Node, http: aiohttp.ClientSession) -> None:
    assert (await _call(http, "PUT", "/v2/processors/p.t", _report()))[0] == 200
    await node.stop()
    again = Node(node.config, clock=node.clock)
    await again.start()
    try:
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{again.port}") as s:
            status, one = await _call(s, "GET", "/v2/processors/p.t")
        assert status == 200 and one["delivered"] == 40
    finally:
        await again.stop()


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ([], "JSON object"),
        (_report(kind="map"), "'kind'"),
        (_report(strategy="maybe"), "'strategy'"),
        (_report(state="dancing"), "'state'"),
        (_report(attempts=-1), "'attempts'"),
        (_report(last_delivery_ms=2**63), "'last_delivery_ms'"),
        (_report(attempts=True), "'attempts'"),
        (_report(interval_s=0), "'interval_s'"),
        (_report(worker=""), "'worker'"),
        (_report(inputs=[{"name": "a", "kind": "topic"}]), "'kind'"),
        (_report(inputs=[{"name": "a", "kind": {"x": 1}}]), "'kind'"),
        (_report(inputs=[{"name": "a", "kind": "stream", "lag": -2}]), "'lag'"),
        (_report(inputs=[{"name": "a", "kind": "stream", "extra": 1}]), "each input"),
        (_report(outputs=[3]), "'outputs'"),
        (_report(colour="red"), "'colour'"),
        ({k: v for k, v in _report().items() if k != "graph"}, "'graph'"),
    ],
)
async def test_a_malformed_report_is_refused_with_a_precise_422(
    http: aiohttp.ClientSession, body: Any, needle: str
) -> None:
    status, err = await _call(http, "PUT", "/v2/processors/p.x", body)
    assert status == 422, err
    assert needle in err["error"] and err["code"] == "invalid_input"
    assert (await _call(http, "GET", "/v2/processors/p.x"))[0] == 404


async def test_bad_names_and_bodies(http: aiohttp.ClientSession) -> None:
    status, err = await _call(http, "GET", "/v2/processors/.hidden")
    assert status == 422 and err["code"] == "invalid_name"
    async with http.put("/v2/processors/p.x", data=b"{not json") as r:
        assert r.status in (400, 422) and "error" in await r.json()
    async with http.put("/v2/processors/p.x", data=b"x" * (70 * 1024)) as r:
        assert r.status == 413 and (await r.json())["code"] == "payload_too_large"
