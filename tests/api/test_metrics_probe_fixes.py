"""Metrics defects a black-box probe found, on real nodes: queue names that looked like
other families, delayed messages never counted as sent, and gauges of deleted or
purged queues left in ``/metrics``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from dynaq.clock import ManualClock
from dynaq.node import Node
from dynaq.prometheus import PROCESSOR_GAUGES, QUEUE_COUNTERS, QUEUE_GAUGES, SLICE_GAUGES, family
from dynaq.testing.process import ROOT, node_process

HOSTILE = (
    "batches",
    "batches.exact",
    "batches.estimated",
    "outbox",
    "outbox.x",
    "processors.p",
    "a.b.c",
    "x.sent",
    "x.depth",
    "x.slice",
    "x.fill.count",
    "normal",
)
"""Queue names that end, begin or read like another family's statsd name."""

Series = tuple[str, tuple[tuple[str, str], ...]]


async def _call(
    http: aiohttp.ClientSession, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    async with http.request(method, path, json=body) as r:
        return r.status, await r.json()


async def _scrape(http: aiohttp.ClientSession) -> list[Sample]:
    async with http.get("/metrics") as r:
        assert r.status == 200
        text = await r.text()
    samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    # One value per series, and every sample of a family with the same label names.
    series = Counter((s.name, tuple(sorted(s.labels.items()))) for s in samples)
    assert [k for k, n in series.items() if n > 1] == []
    for fam in text_string_to_metric_families(text):
        assert len({tuple(sorted(s.labels)) for s in fam.samples if s.name == fam.name}) <= 1, (
            fam.name
        )
    return samples


def _values(samples: list[Sample]) -> dict[Series, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in samples}


def _q(queue: str) -> tuple[tuple[str, str], ...]:
    return (("queue", queue),)


async def _tick(clock: ManualClock, seconds: float) -> None:
    """Advance the node's clock in small steps, letting its movers run at each."""
    steps = max(1, round(seconds / 0.1))
    for _ in range(steps):
        clock.advance(seconds / steps)
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.05)


# 1. a queue's name is a label value, whatever it reads like --------------------------


def test_queue_figures_are_named_by_their_last_word_whatever_the_queue_is_called() -> None:
    for queue in HOSTILE:
        for what in QUEUE_COUNTERS:
            assert family(f"{queue}.{what}.count", counter=True) == (
                f"dynaq_queue_{what}",
                _q(queue),
            )
        for what, fam in QUEUE_GAUGES.items():
            assert family(f"{queue}.{what}.count", counter=False) == (
                f"dynaq_queue_{fam}",
                _q(queue),
            )
        for what in SLICE_GAUGES:
            assert family(f"{queue}.slice.{what}", counter=False) == (
                f"dynaq_queue_slice_{what}",
                _q(queue),
            )
        for what in PROCESSOR_GAUGES:
            assert family(f"processors.{queue}.{what}.count", counter=False) == (
                f"dynaq_processor_{what}",
                (("processor", queue),),
            )
    # What keeps that unambiguous: no other counter ends in a queue's figure.
    from dynaq.prometheus import NON_QUEUE_EVENTS

    assert not NON_QUEUE_EVENTS & QUEUE_COUNTERS
    assert not PROCESSOR_GAUGES & (set(QUEUE_GAUGES) | SLICE_GAUGES)
    # ... and the fixed names still map as documented.
    assert family("batches.exact.opened.count", True) == (
        "dynaq_batches_opened",
        (("mode", "exact"),),
    )
    assert family("batches.items.acked.count", True) == ("dynaq_batches_items_acked", ())
    assert family("outbox.t.leader.fenced.count", True) == ("dynaq_outbox_t_leader_fenced", ())


_INCR = re.compile(r'\.incr\(\s*(?:f?"([^"]+)"|self\._prefix \+ "([^"]+)")')


def test_no_counter_but_a_queues_ends_in_a_queue_figure() -> None:
    """Every counter name in the code that is not ``{<queue>}.<figure>.count`` ends in
    a word of ``NON_QUEUE_EVENTS`` (or an outbox leader event): a new one that ends in
    a queue's figure would be read as a queue's, so it must be named otherwise."""
    from dynaq.prometheus import NON_QUEUE_EVENTS

    names = [
        m.group(1) or m.group(2)
        for path in (ROOT / "dynaq").rglob("*.py")
        for m in _INCR.finditer(path.read_text())
    ]
    assert len(names) > 15  # the scan found the call sites
    for name in names:
        if name.startswith(("{info.name}.", "{w.info.name}.")):
            assert name.split(".")[-2] in QUEUE_COUNTERS, name
        elif name.endswith("leader.{kind}.count"):
            continue  # acquired, refreshed, revoked, fenced: in NON_QUEUE_EVENTS
        else:
            assert name.split(".")[-2] in NON_QUEUE_EVENTS, name


async def test_queues_named_like_other_families_keep_their_queue_label(
    node: Node, http: aiohttp.ClientSession
) -> None:
    for queue in HOSTILE:
        assert (await _call(http, "PUT", f"/v1/queues/{queue}"))[0] == 201
        body: dict[str, Any] = {"messages": [{"body": "now"}, {"body": "later", "delay_s": 600}]}
        assert (await _call(http, "POST", f"/v2/queues/{queue}/messages", body))[0] == 200
        body = {"max_messages": 2, "visibility_timeout_s": 600}
        status, got = await _call(http, "POST", f"/v2/queues/{queue}/messages/receive", body)
        assert status == 200 and len(got["messages"]) == 1
        assert (await _call(http, "GET", f"/v2/queues/{queue}"))[0] == 200  # watch its slice
    await node.queues.statistics.refresh()
    samples = await _scrape(http)
    values = _values(samples)
    for queue in HOSTILE:
        assert values[("dynaq_queue_sent_total", _q(queue))] == 2, queue
        assert values[("dynaq_queue_delayed_total", _q(queue))] == 1, queue
        assert values[("dynaq_queue_received_total", _q(queue))] == 1, queue
        assert values[("dynaq_queue_depth", _q(queue))] == 1, queue
        assert values[("dynaq_queue_fill_percent", _q(queue))] == 50, queue
        assert values[("dynaq_queue_slice_in_flight", _q(queue))] == 1, queue
        assert values[("dynaq_queue_slice_delayed", _q(queue))] == 1, queue
    # No queue's figure went to an unlabelled family (or a batches/processor one).
    leaked = {s.name for s in samples if not s.labels}
    assert not {n for n in leaked if n.startswith(("dynaq_batches", "dynaq_outbox", "dynaq_x"))}
    assert not {n for n in leaked if n.startswith(("dynaq_a_", "dynaq_processors", "dynaq_normal"))}
    assert not any(s.name.startswith("dynaq_processor_") for s in samples)


# 2. a delayed message is sent when its send is acknowledged ---------------------------


async def test_delayed_messages_count_as_sent_once_on_every_way_in(
    node: Node, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    for queue in ("dq", "pm", "fan", "tx"):
        assert (await _call(http, "PUT", f"/v1/queues/{queue}"))[0] == 201
    assert await _call(http, "PATCH", "/v1/queues/dq", {"delay_s": 1}) == (200, "ok")
    body: dict[str, Any] = {"messages": [{"body": f"d{i}"} for i in range(5)]}
    assert (await _call(http, "POST", "/v2/queues/dq/messages", body))[0] == 200
    body = {"messages": [{"body": "p1", "delay_s": 1}, {"body": "p2", "delay_s": 1}, {"body": "n"}]}
    assert (await _call(http, "POST", "/v2/queues/pm/messages", body))[0] == 200
    assert (await _call(http, "PUT", "/v1/topics/t"))[0] == 201
    assert (await _call(http, "PUT", "/v1/topics/t/queues/fan"))[0] == 200
    body = {"messages": [{"body": "f1", "delay_s": 1}, {"body": "f2"}]}
    assert (await _call(http, "POST", "/v2/topics/t/messages", body))[0] == 200
    body = {"enqueue": [{"queue": "tx", "body": "t1", "delay_s": 1}, {"queue": "tx", "body": "t2"}]}
    assert (await _call(http, "POST", "/v2/transactions", body))[0] == 200
    sent = {"dq": 5, "pm": 3, "fan": 2, "tx": 2}
    delayed = {"dq": 5, "pm": 2, "fan": 1, "tx": 1}

    def check(values: dict[Series, float]) -> None:
        for queue, n in sent.items():
            assert values.get(("dynaq_queue_sent_total", _q(queue))) == n, queue
            assert values.get(("dynaq_queue_delayed_total", _q(queue))) == delayed[queue], queue

    check(_values(await _scrape(http)))
    # Due now: the delay mover makes them visible, which sends nothing again.
    await _tick(clock, 1.5)
    body = {"max_messages": 10, "visibility_timeout_s": 600}
    for queue, n in sent.items():
        status, got = await _call(http, "POST", f"/v2/queues/{queue}/messages/receive", body)
        assert status == 200 and len(got["messages"]) == n, queue
    values = _values(await _scrape(http))
    check(values)
    assert all(values[("dynaq_queue_received_total", _q(q))] == n for q, n in sent.items())


def _json(url: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data, method=method)
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=10) as r:
        return int(r.status), json.loads(r.read())


def _counter(lines: list[str], name: str) -> int:
    """The sum of statsd counter ``name`` over ``lines`` (``name:value|c``)."""
    total = 0
    for line in lines:
        key, _, rest = line.partition(":")
        value, _, kind = rest.partition("|")
        if key == name and kind == "c":
            total += int(value)
    return total


def test_delayed_messages_reach_statsd_as_sent(tmp_path: Path) -> None:
    # A node process (its statsd flush sends on its own loop) and a UDP listener.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", 0))
        udp.settimeout(0.1)
        env = {
            "DYNAQ_STATS_TYPE": "statsd",
            "DYNAQ_STATS_ADDRESS": f"127.0.0.1:{udp.getsockname()[1]}",
            "DYNAQ_STATS_PREFIX": "dq.",
            "DYNAQ_STATS_FLUSH_INTERVAL_S": "0.1",
        }
        p = node_process(tmp_path, env=env)
        p.start()
        try:
            assert _json(p.url, "PUT", "/v1/queues/dq")[0] == 201
            assert _json(p.url, "PATCH", "/v1/queues/dq", {"delay_s": 0.3}) == (200, "ok")
            msgs: list[dict[str, Any]] = [{"body": f"d{i}"} for i in range(5)]
            msgs += [{"body": "p", "delay_s": 0.2}, {"body": "n", "delay_s": 0}]
            assert _json(p.url, "POST", "/v2/queues/dq/messages", {"messages": msgs})[0] == 200
            got: list[Any] = []
            receive = {"max_messages": 10, "visibility_timeout_s": 600, "wait_time_s": 1}
            deadline = time.monotonic() + 10
            while len(got) < 7 and time.monotonic() < deadline:
                status, out = _json(p.url, "POST", "/v2/queues/dq/messages/receive", receive)
                assert status == 200
                got += out["messages"]
            assert len(got) == 7  # all moved into the queue by now
            lines: list[str] = []
            deadline = time.monotonic() + 1.0  # several flushes after the last receive
            while time.monotonic() < deadline:
                with contextlib.suppress(TimeoutError):  # no packet in this 0.1 s
                    lines += udp.recv(65536).decode().splitlines()
        finally:
            p.kill()
    assert _counter(lines, "dq.dq.sent.count") == 7
    assert _counter(lines, "dq.dq.delayed.count") == 6
    assert _counter(lines, "dq.dq.received.count") == 7


# 3. gauges are of queues that exist, as they are now --------------------------------


async def test_a_deleted_queue_has_no_gauges_and_a_purged_one_shows_empty(
    node: Node, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    for queue in ("gone", "purged", "kept"):
        assert (await _call(http, "PUT", f"/v1/queues/{queue}"))[0] == 201
        body: dict[str, Any] = {"messages": [{"body": f"m{i}"} for i in range(3)]}
        assert (await _call(http, "POST", f"/v2/queues/{queue}/messages", body))[0] == 200
        body = {"max_messages": 1, "visibility_timeout_s": 600}
        assert (await _call(http, "POST", f"/v2/queues/{queue}/messages/receive", body))[0] == 200
        assert (await _call(http, "GET", f"/v2/queues/{queue}"))[0] == 200  # watch its slice
    clock.advance(4)
    await node.queues.statistics.refresh()
    values = _values(await _scrape(http))
    for queue in ("gone", "purged", "kept"):
        assert values[("dynaq_queue_slice_visible", _q(queue))] == 2
        assert values[("dynaq_queue_slice_oldest_age_s", _q(queue))] >= 4
        assert values[("dynaq_queue_fill_percent", _q(queue))] == 100

    assert (await _call(http, "DELETE", "/v1/queues/gone"))[0] == 200
    assert (await _call(http, "GET", "/v2/queues/gone"))[0] == 404
    status, task = await _call(http, "POST", "/v2/queues/purged/purge")
    assert status == 202
    for _ in range(100):  # the purge is a task
        await _tick(clock, 0.2)
        if (await _call(http, "GET", f"/v2/tasks/{task['id']}"))[1]["state"] == "done":
            break
    await node.queues.statistics.refresh()
    _, desc = await _call(http, "GET", "/v2/queues/purged")
    assert desc["visible"] == 0 and desc["oldest_age_s"] == 0.0, desc
    samples = await _scrape(http)
    assert not [s for s in samples if s.labels.get("queue") == "gone" and s.name[-6:] != "_total"]
    values = _values(samples)
    purged = _q("purged")
    assert values[("dynaq_queue_slice_visible", purged)] == 0
    assert values[("dynaq_queue_slice_in_flight", purged)] == desc["in_flight"]
    assert values[("dynaq_queue_slice_oldest_age_s", purged)] == 0  # not the age before
    assert values[("dynaq_queue_depth", purged)] == 0
    assert values[("dynaq_queue_slice_visible", _q("kept"))] == 2  # the others stay
    assert values[("dynaq_queue_fill_percent", _q("kept"))] == 100
    assert values[("dynaq_queue_sent_total", _q("gone"))] == 3  # counters stay
