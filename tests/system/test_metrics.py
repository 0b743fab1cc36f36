"""statsd metrics reach a real statsd daemon under the contract's names."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest

from dynaq.testing.process import node_process
from dynaq.testing.servers import statsd as statsd_server
from dynaq.testing.servers.statsd import StatsdServer


@pytest.fixture(scope="module")
def statsd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StatsdServer]:
    why = statsd_server.available()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"statsd daemon unavailable in CI: {why}")
        pytest.skip(why)
    server = statsd_server.start_statsd(tmp_path_factory.mktemp("statsd"))
    yield server
    server.stop()


async def _until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Retry the blocking ``check`` (in a worker thread) until it holds."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        try:
            assert await asyncio.to_thread(check)
            return
        except AssertionError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)


async def test_queue_metrics_reach_statsd(statsd: StatsdServer, tmp_path: Path) -> None:
    p = node_process(
        tmp_path,
        env={
            "DYNAQ_STATS_TYPE": "statsd",
            "DYNAQ_STATS_ADDRESS": statsd.address,
            "DYNAQ_STATS_PREFIX": "dynaq.",
            "DYNAQ_STATS_FLUSH_INTERVAL_S": "0.2",
        },
    )
    await asyncio.to_thread(p.start)
    try:
        async with aiohttp.ClientSession(p.url) as s:
            async with s.put("/v1/queues/metq") as r:
                assert r.status == 201
            for i in range(4):
                async with s.put("/v1/queues/metq/message", data=b"%d" % i) as r:
                    assert r.status == 200
            async with s.get("/v1/queues/metq/messages/8") as r:
                got = await r.json()
            assert len(got) == 4
            async with s.delete(f"/v1/queues/metq/message/{got[0]['id']}") as r:
                assert await r.json() is True

        def counters_ok() -> bool:
            c = statsd.counters()
            return (
                c.get("dynaq.metq.sent.count") == 4
                and c.get("dynaq.metq.received.count") == 4
                and c.get("dynaq.metq.deleted.count") == 1
            )

        await _until(counters_ok)

        def gauges_ok() -> bool:
            g = statsd.gauges()
            return (
                g.get("dynaq.metq.depth.count") == 3
                and g.get("dynaq.metq.fill.count") == 50
                and "dynaq.metq.approximate_depth.count" in g
            )

        await _until(gauges_ok)
    finally:
        await asyncio.to_thread(p.kill)


def test_stats_none_sends_nothing(statsd: StatsdServer, tmp_path: Path) -> None:
    before = statsd.counters()
    p = node_process(
        tmp_path,
        env={"DYNAQ_STATS_TYPE": "none", "DYNAQ_STATS_ADDRESS": statsd.address},
    ).start()
    try:
        import urllib.request

        req = urllib.request.Request(p.url + "/v1/queues/quiet", method="PUT")
        urllib.request.urlopen(req).close()
        req = urllib.request.Request(p.url + "/v1/queues/quiet/message", data=b"x", method="PUT")
        urllib.request.urlopen(req).close()
    finally:
        p.kill()
    assert not any(k.startswith("dynaq.quiet") for k in statsd.counters())
    assert statsd.counters().keys() >= before.keys()


async def test_processor_reports_reach_statsd_as_gauges(
    statsd: StatsdServer, tmp_path: Path
) -> None:
    p = node_process(
        tmp_path,
        env={
            "DYNAQ_STATS_TYPE": "statsd",
            "DYNAQ_STATS_ADDRESS": statsd.address,
            "DYNAQ_STATS_PREFIX": "dynaq.",
            "DYNAQ_STATS_FLUSH_INTERVAL_S": "0.2",
        },
    )
    await asyncio.to_thread(p.start)
    try:
        report = {
            "graph": "g",
            "kind": "transform",
            "strategy": "exactly_once",
            "state": "running",
            "worker": "w1",
            "inputs": [{"name": "in", "kind": "stream", "position": 10, "lag": 7}],
            "outputs": ["out"],
            "attempts": 12,
            "delivered": 10,
            "handled_errors": 2,
            "interval_s": 5,
        }
        async with (
            aiohttp.ClientSession(p.url) as s,
            s.put("/v2/processors/g.double", json=report) as r,
        ):
            assert r.status == 200, await r.text()

        def gauges_ok() -> bool:
            g = statsd.gauges()
            return (
                g.get("dynaq.processors.g.double.lag.count") == 7
                and g.get("dynaq.processors.g.double.attempts.count") == 12
                and g.get("dynaq.processors.g.double.delivered.count") == 10
                and g.get("dynaq.processors.g.double.handled_errors.count") == 2
            )

        await _until(gauges_ok)
    finally:
        await asyncio.to_thread(p.kill)
