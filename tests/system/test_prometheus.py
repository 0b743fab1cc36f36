"""``GET /metrics`` scraped from a live node and parsed, and the Grafana dashboard checked
against it: every metric a panel queries is one the node exports."""

from __future__ import annotations

import asyncio
import json
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from dynaq.client import AsyncClient, NewMessage
from dynaq.testing.process import ROOT, NodeProcess, node_process

TOKEN = "prom-0123456789abcdef"
DASHBOARD = ROOT / "config" / "grafana" / "dynaq-prometheus.json"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    p = node_process(
        tmp_path_factory.mktemp("prom"), env={"DYNAQ_AUTH_TOKENS": f"ops:{TOKEN}:admin=*"}
    )
    p.start()
    try:
        yield p
    finally:
        p.kill()


async def _scrape(node: NodeProcess, token: str | None = TOKEN) -> tuple[int, str, str]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{node.url}/metrics", headers=headers) as r,
    ):
        return r.status, r.headers.get("Content-Type", ""), await r.text()


def _samples(text: str) -> list[Sample]:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def _node_values(samples: list[Sample]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Each series summed over the node's workers, as a ``sum without (worker)`` query
    does: a node of several labels each worker's series ``worker`` (its node-wide
    ones, like the depth, are shown once, unlabelled); a node of one, as they are."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = defaultdict(float)
    for s in samples:
        labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "worker"))
        out[(s.name, labels)] += s.value
    return dict(out)


async def _traffic(node: NodeProcess, queue: str = "metq") -> None:
    """Queue and batch traffic, so every family has samples."""
    async with AsyncClient(node.url, token=TOKEN) as c:
        await c.create_queue(queue)
        batch = await c.open_batch()
        (block,) = await c.add_items(batch, 1)
        (item,) = block.item_ids()
        await c.enqueue(queue, [b"1", b"2", b"3", NewMessage("4", {"dynaq.batch_item": item})])
        await c.close_batch(batch)
        got = await c.receive(queue, 8)
        assert len(got) == 4
        await c.delete(queue, [m.id for m in got if m.body in (b"1", b"4")])


async def test_metrics_are_served_in_prometheus_text_and_parse(node: NodeProcess) -> None:
    await _traffic(node)
    q = (("queue", "metq"),)
    # On a node of several workers the depth gauge is the store's count, read each
    # second (README, "Metrics"): scrape until it has been read since the traffic.
    deadline = asyncio.get_running_loop().time() + 5
    while True:
        status, ctype, text = await _scrape(node)
        values = _node_values(_samples(text))
        if values.get(("dynaq_queue_depth", q)) == 2:
            break
        assert asyncio.get_running_loop().time() < deadline, values.get(("dynaq_queue_depth", q))
        await asyncio.sleep(0.2)
    assert status == 200 and ctype.startswith("text/plain")
    assert values[("dynaq_queue_sent_total", q)] == 4
    assert values[("dynaq_queue_received_total", q)] == 4
    assert values[("dynaq_queue_deleted_total", q)] == 2
    assert values[("dynaq_queue_depth", q)] == 2
    assert values[("dynaq_queue_fill_percent", q)] == 50
    assert values[("dynaq_batches_opened_total", (("mode", "exact"),))] == 1
    assert values[("dynaq_batches_completed_total", ())] == 1
    enqueue = (
        ("method", "POST"),
        ("route", "/v2/queues/{queue}/messages"),
        ("status", "200"),
    )
    assert values[("dynaq_http_request_duration_seconds_count", enqueue)] == 1
    assert values[("dynaq_store_commit_duration_seconds_count", ())] >= 4
    # Refused requests are timed with their status; routes are templates, never raw paths.
    status, _, _ = await _scrape(node, token=None)
    assert status == 401
    _, _, text = await _scrape(node)
    routes = {s.labels["route"] for s in _samples(text) if "route" in s.labels}
    assert not any("metq" in r for r in routes)
    refused = (("method", "GET"), ("route", "/metrics"), ("status", "401"))
    assert _node_values(_samples(text))[("dynaq_http_request_duration_seconds_count", refused)] == 1


def _dashboard_metrics() -> set[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert exprs
    return {m for e in exprs for m in re.findall(r"\bdynaq_[a-z_]+\b", e)}


async def test_every_metric_the_dashboard_queries_is_exported(node: NodeProcess) -> None:
    await _traffic(node, "dashq")  # whatever ran before: every family has samples
    _, _, text = await _scrape(node)
    exported = {s.name for s in _samples(text)}
    wanted = await asyncio.to_thread(_dashboard_metrics)
    assert wanted - exported == set()
    assert len(wanted) >= 10


def test_compose_provisions_prometheus_and_the_dashboard() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    mounts = [v.split(":")[0] for v in compose["grafana"]["volumes"]]
    assert "./config/grafana/dynaq-prometheus.json" in mounts
    datasources = yaml.safe_load((ROOT / "config/cluster/grafana-datasources.yml").read_text())
    uids = {d.get("uid") for d in datasources["datasources"] if d["type"] == "prometheus"}
    dash = json.loads(DASHBOARD.read_text())
    assert {p["datasource"]["uid"] for p in dash["panels"]} <= uids
    prom = yaml.safe_load((ROOT / "config/cluster/prometheus.yml").read_text())
    (job,) = prom["scrape_configs"]
    targets = job["static_configs"][0]["targets"]
    assert sorted(t.split(":")[0] for t in targets) == ["dynaq-1", "dynaq-2", "dynaq-3"]
    assert job["metrics_path"] == "/metrics" and job["authorization"]["type"] == "Bearer"
    assert "prometheus" in compose and "9090:9090" in compose["prometheus"]["ports"]


async def test_metrics_can_be_turned_off(tmp_path: Path) -> None:
    p = node_process(tmp_path, env={"DYNAQ_STATS_PROMETHEUS": "false"})
    await asyncio.to_thread(p.start)
    try:
        async with aiohttp.ClientSession() as http, http.get(f"{p.url}/metrics") as r:
            assert r.status == 404
            assert (await r.json())["code"] == "not_found"
    finally:
        await asyncio.to_thread(p.kill)


async def test_queues_whose_names_differ_in_punctuation_are_separate_series(
    node: NodeProcess,
) -> None:
    """Every per-queue figure is labelled: ``col-x``, ``col.x`` and ``col_x`` are three
    series of one family, not one family name the three overwrite or sum."""
    names = ("col-x", "col.x", "col_x")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=auth) as http:
        for n, name in enumerate(names, start=1):
            async with http.put(f"{node.url}/v1/queues/{name}") as r:
                assert r.status in (200, 201), await r.text()
            body = {"messages": [{"body": "later", "delay_s": 600}] * n}
            async with http.post(f"{node.url}/v2/queues/{name}/messages", json=body) as r:
                assert r.status == 200, await r.text()
            async with http.get(f"{node.url}/v2/queues/{name}") as r:  # asks for its figures
                assert r.status == 200
    want = {name: float(n) for n, name in enumerate(names, start=1)}
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        _, _, text = await _scrape(node)
        samples = _samples(text)
        values = _node_values(samples)
        delayed = {
            q: values[("dynaq_queue_delayed_total", (("queue", q),))]
            for q in want
            if ("dynaq_queue_delayed_total", (("queue", q),)) in values
        }
        slice_delayed = {
            q: values[("dynaq_queue_slice_delayed", (("queue", q),))]
            for q in want
            if ("dynaq_queue_slice_delayed", (("queue", q),)) in values
        }
        if slice_delayed == want or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.5)
    assert delayed == want
    assert slice_delayed == want
    assert not any(s.name.startswith("dynaq_col_") for s in samples)


def test_statsd_names_map_to_labelled_families() -> None:
    from dynaq.prometheus import family

    assert family("a.b.sent.count", counter=True) == ("dynaq_queue_sent", (("queue", "a.b"),))
    assert family("q.dead_lettered.count", counter=True) == (
        "dynaq_queue_dead_lettered",
        (("queue", "q"),),
    )
    assert family("a.slice.oldest_age_s", counter=False) == (
        "dynaq_queue_slice_oldest_age_s",
        (("queue", "a"),),
    )
    assert family("processors.p.q.lag.count", counter=False) == (
        "dynaq_processor_lag",
        (("processor", "p.q"),),
    )
    assert family("batches.exact.opened.count", counter=True) == (
        "dynaq_batches_opened",
        (("mode", "exact"),),
    )
    assert family("batches.completed.count", counter=True) == ("dynaq_batches_completed", ())
