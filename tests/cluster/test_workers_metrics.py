"""``GET /metrics`` of a node of two worker processes shows both workers, on every scrape.

The kernel hands each connection to either worker, so a worker that answered
with its own figures alone made series appear and vanish between scrapes. The
worker that answers now collects the other's figures over its private port (a
signed node-to-node request) and labels every series with ``worker``.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections import Counter
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from dynaq.prometheus import PrometheusMetrics, WorkerText, merge_workers
from dynaq.testing import run_node
from tests.cluster.workers import wait_workers, worker_urls

pytestmark = pytest.mark.timeout(240)

NODE = "dynaq-1"
W0, W1 = f"{NODE}-w0", f"{NODE}-w1"
TOKEN = "metrics-0123456789abcdef"


async def _scrape(url: str, token: str | None = None) -> tuple[int, str]:
    """One ``GET /metrics`` over a fresh connection (the kernel picks the worker)."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics", headers=headers) as r:
        return r.status, await r.text()


def _samples(text: str) -> list[Sample]:
    """Every sample of a scrape; parsing fails the test if the text is not valid."""
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def _sent(text: str, queue: str) -> dict[str, float]:
    """``dynaq_queue_sent_total{queue}`` by worker."""
    out: dict[str, float] = {}
    for s in _samples(text):
        if s.name == "dynaq_queue_sent_total" and s.labels.get("queue") == queue:
            assert set(s.labels) == {"queue", "worker"}, s.labels
            out[s.labels["worker"]] = s.value
    return out


def _scrape_ok(text: str) -> dict[str, float]:
    return {
        s.labels["worker"]: s.value for s in _samples(text) if s.name == "dynaq_worker_scrape_ok"
    }


def _families_once(text: str) -> None:
    """HELP and TYPE once per family, and every sample labelled with its worker but
    the node's depth, which is shown once, unlabelled."""
    for kind in ("HELP", "TYPE"):
        names = re.findall(rf"^# {kind} (\S+)", text, flags=re.M)
        repeated = [n for n, k in Counter(names).items() if k > 1]
        assert not repeated, f"{kind} repeated for {repeated}"
    for s in _samples(text):
        assert ("worker" in s.labels) != (s.name == "dynaq_queue_depth"), s


def _depth(text: str, queue: str) -> list[float]:
    """Every ``dynaq_queue_depth{queue}`` sample's value (one for the node)."""
    return [
        s.value
        for s in _samples(text)
        if s.name == "dynaq_queue_depth" and s.labels.get("queue") == queue
    ]


async def _v2_depth(url: str, queue: str) -> int:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/v2/queues/{queue}") as r:
        assert r.status == 200, await r.text()
        body = await r.json()
        assert body["visible"] + body["in_flight"] == body["depth"], body
        return int(body["depth"])


async def _depth_everywhere(urls: list[str], queue: str, want: int, within_s: float = 5) -> None:
    """Every worker answers ``want`` as the queue's depth in ``GET /v2/queues/:queue``
    at once (the store's count), and the scrape shows it once within a refresh."""
    for url in urls:
        assert await _v2_depth(url, queue) == want
    deadline = time.monotonic() + within_s
    while True:
        status, text = await _scrape(urls[0])
        assert status == 200
        if _depth(text, queue) == [want]:
            return
        assert time.monotonic() < deadline, _depth(text, queue)
        await asyncio.sleep(0.2)


async def _send(url: str, queue: str, n: int) -> None:
    """``n`` messages, each over a fresh connection (so they land on both workers)."""
    for i in range(n):
        async with (
            aiohttp.ClientSession() as http,
            http.put(f"{url}/v1/queues/{queue}/message", data=f"m{i}".encode()) as r,
        ):
            assert r.status == 200, await r.text()


def _listener_pid(port: int) -> int:
    """The process listening on ``port`` of 127.0.0.1 (from /proc)."""
    inode = ""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if int(f[1].split(":")[1], 16) == port and f[3] == "0A":
            inode = f[9]
    assert inode, f"nothing listens on {port}"
    for d in Path("/proc").iterdir():
        if not d.name.isdecimal():
            continue
        try:
            for fd in (d / "fd").iterdir():
                if os.readlink(fd) == f"socket:[{inode}]":
                    return int(d.name)
        except OSError:
            continue
    raise AssertionError(f"no process holds port {port}")


async def _closed(port: int, within_s: float = 10.0) -> None:
    """Wait until nothing accepts connections on ``port`` any more."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return
        writer.close()
        await asyncio.sleep(0.05)
    raise AssertionError(f"port {port} still accepts connections")


async def _both_answer(url: str, token: str | None = None, within_s: float = 60.0) -> None:
    """Wait until a scrape holds both workers' figures (their views know each other)."""
    deadline = time.monotonic() + within_s
    while True:
        status, text = await _scrape(url, token)
        if status == 200 and _scrape_ok(text) == {W0: 1.0, W1: 1.0}:
            return
        assert time.monotonic() < deadline, (status, text[:500])
        await asyncio.sleep(0.2)


async def test_every_scrape_shows_both_workers_and_counters_never_go_back(
    tmp_path: Path,
) -> None:
    async with run_node(directory=tmp_path, http_workers=2) as node:
        await wait_workers(node, 2)
        urls = await worker_urls(node)
        async with aiohttp.ClientSession() as http, http.put(f"{node.url}/v1/queues/w2") as r:
            assert r.status == 201
        await _send(node.url, "w2", 30)
        # A few through each worker's own address, so both count some whatever the kernel did.
        await _send(urls[W0], "w2", 5)
        await _send(urls[W1], "w2", 5)
        sent = 40

        last: dict[str, float] = {}
        for _ in range(10):
            status, text = await _scrape(node.url)
            assert status == 200, text
            _families_once(text)
            by_worker = _sent(text, "w2")
            assert set(by_worker) == {W0, W1}, text
            assert all(v > 0 for v in by_worker.values()), by_worker
            assert sum(by_worker.values()) == sent, by_worker
            assert _scrape_ok(text) == {W0: 1.0, W1: 1.0}
            for w, v in by_worker.items():
                assert v >= last.get(w, 0.0), (w, v, last)
            last = by_worker
        # Each worker counted only what it wrote; the depth is the node's, exact, from
        # either worker (the store keeps the count in every write's transaction).
        await _depth_everywhere([node.url, urls[W0], urls[W1]], "w2", sent)

        # kill -9 one worker: the supervisor starts it again. Meanwhile every scrape
        # answers, parses, shows the survivor's counters unchanged and says the
        # dead worker is missing from it (never a stale or half answer).
        port = int(urls[W1].rsplit(":", 1)[1])
        pid = await asyncio.to_thread(_listener_pid, port)
        os.kill(pid, signal.SIGKILL)
        await _closed(port)
        left_out = 0
        for _ in range(10):
            status, text = await _scrape(node.url)
            assert status == 200, text
            _families_once(text)
            by_worker = _sent(text, "w2")
            assert by_worker[W0] == last[W0], (by_worker, last)
            ok = _scrape_ok(text)
            assert set(ok) == {W0, W1} and ok[W0] == 1.0, ok
            if ok[W1] == 0.0:
                left_out += 1
                assert W1 not in by_worker
                assert re.search(rf"^# .*{W1}.*left out", text, flags=re.M), text[:500]
            await asyncio.sleep(0.05)
        assert left_out, "the killed worker was never reported missing"

        # Back: both workers again (the restarted one may listen on new ports, which
        # gossip announces); it counts from zero.
        await wait_workers(node, 2)
        urls = await worker_urls(node)
        port = int(urls[W1].rsplit(":", 1)[1])
        assert await asyncio.to_thread(_listener_pid, port) != pid
        await _send(urls[W1], "w2", 3)
        await _both_answer(node.url)
        for _ in range(5):
            status, text = await _scrape(node.url)
            assert status == 200
            _families_once(text)
            by_worker = _sent(text, "w2")
            assert by_worker[W0] == last[W0] and by_worker[W1] == 3, by_worker
            assert _scrape_ok(text) == {W0: 1.0, W1: 1.0}
        # The restarted worker counts its sends from zero, but the depth is the store's.
        await _depth_everywhere([node.url, urls[W0], urls[W1]], "w2", sent + 3)


async def test_a_token_scrape_gathers_both_workers(tmp_path: Path) -> None:
    """With client tokens configured, ``/metrics`` still needs one, and the request
    between workers is signed instead (it carries no client token)."""
    async with run_node(
        directory=tmp_path,
        http_workers=2,
        env={"DYNAQ_AUTH_TOKENS": f"ops:{TOKEN}:admin=*"},
    ) as node:
        await _both_answer(node.url, TOKEN)
        for _ in range(6):
            status, text = await _scrape(node.url, TOKEN)
            assert status == 200
            _families_once(text)
            workers = {s.labels["worker"] for s in _samples(text) if "worker" in s.labels}
            assert workers == {W0, W1}
            status, _ = await _scrape(node.url)
            assert status == 401


async def test_one_worker_answers_as_before(tmp_path: Path) -> None:
    """A node of one worker: no worker label, no scrape gauge."""
    async with run_node(directory=tmp_path, http_workers=1) as node:
        async with aiohttp.ClientSession() as http, http.put(f"{node.url}/v1/queues/one") as r:
            assert r.status == 201
        await _send(node.url, "one", 3)
        status, text = await _scrape(node.url)
        assert status == 200
        samples = _samples(text)
        assert all("worker" not in s.labels for s in samples)
        assert not [s for s in samples if s.name == "dynaq_worker_scrape_ok"]
        assert not text.startswith("# dynaq")
        sent = [s for s in samples if s.name == "dynaq_queue_sent_total"]
        assert [(s.labels, s.value) for s in sent] == [({"queue": "one"}, 3.0)]


def test_merge_labels_each_worker_and_names_the_missing() -> None:
    """The merge alone: one family per name, each sample labelled, the left-out
    worker (no answer, or text that does not parse) named in a comment and at 0."""
    a, b = PrometheusMetrics(), PrometheusMetrics()
    a.incr("q.sent.count", 2)
    b.incr("q.sent.count", 5)
    # Depth: the store's count, read alike by both (the node's, once).
    a.add_gauge_provider(lambda: {"q.depth.count": 7.0})
    b.add_gauge_provider(lambda: {"q.depth.count": 7.0, "r.depth.count": 1.0})
    b.incr("r.sent.count")
    a.observe(
        "http_request_duration_seconds", 0.01, {"method": "GET", "route": "/x", "status": "200"}
    )
    text = merge_workers(
        [
            WorkerText("n-w0", a.exposition()),
            WorkerText("n-w1", b.exposition()),
            WorkerText("n-w2", None, "no answer within 1 s"),
            WorkerText("n-w3", b"this is { not the text format\n"),
        ]
    ).decode()
    _families_once(text)
    assert _sent(text, "q") == {"n-w0": 2.0, "n-w1": 5.0}
    assert _sent(text, "r") == {"n-w1": 1.0}
    assert _depth(text, "q") == [7.0]
    assert _depth(text, "r") == [1.0]  # one worker knows the queue yet: it is shown
    assert _scrape_ok(text) == {"n-w0": 1.0, "n-w1": 1.0, "n-w2": 0.0, "n-w3": 0.0}
    notes = [line for line in text.splitlines() if line.startswith("# dynaq")]
    assert notes[0] == "# dynaq: worker n-w2 left out of this scrape: no answer within 1 s"
    assert notes[1].startswith("# dynaq: worker n-w3 left out of this scrape: its figures do")
    http = [s for s in _samples(text) if s.name == "dynaq_http_request_duration_seconds_bucket"]
    assert http and {s.labels["worker"] for s in http} == {"n-w0"}
    commits = [s for s in _samples(text) if s.name == "dynaq_store_commit_duration_seconds_count"]
    assert {s.labels["worker"] for s in commits} == {"n-w0", "n-w1"}
