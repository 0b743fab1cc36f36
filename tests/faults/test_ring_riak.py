"""A 3-node dynaq ring on the session's Riak KV node, under the recorded workload.

* kill -9 of a node mid-consumption, restarted once the survivors dropped it:
  the history checker's verdict (nothing lost, nothing stuck);
* a queue config PATCH on one node reaches every node within the sync interval;
* the Riak node paused (SIGSTOP of its beam for ~5 s, then SIGCONT): only
  retriable 503s, nothing lost.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import aiohttp
import pytest

from dynaq.testing import History, Workload, run_cluster, run_workload
from dynaq.testing.servers.riak import RiakServer
from tests.faults.helpers import assert_verdict, kill9_and_rejoin, server_errors
from tests.fixtures.riak import new_prefix

NAMES = ["dynaq-1", "dynaq-2", "dynaq-3"]
SYNC_S = 1.0


@pytest.mark.slow
async def test_riak_ring_kill9_mid_consumption_and_config_reaches_every_node(
    tmp_path: Path, riak: RiakServer
) -> None:
    async with run_cluster(
        3,
        "riak",
        riak_http=[riak.http],
        keyspace=new_prefix(),
        directory=tmp_path,
        timeout_s=90,
        env={"DYNAQ_RIAK_N_VAL": "1"},
    ) as ring:
        endpoints = [n.url for n in ring.nodes]

        # Config: a PATCH on one node is seen by the others within the sync interval.
        async with aiohttp.ClientSession() as s:
            async with s.put(f"{endpoints[0]}/v1/queues/cfg") as r:
                assert r.status in (200, 201), await r.text()
            t0 = time.monotonic()
            async with s.patch(
                f"{endpoints[0]}/v1/queues/cfg", json={"visibility_timeout": 7}
            ) as r:
                assert r.status == 200, await r.text()
            pending = set(endpoints[1:])
            while pending and time.monotonic() - t0 < SYNC_S * 30:
                for url in list(pending):
                    async with s.get(f"{url}/v1/queues/cfg") as r:
                        if r.status == 200 and (await r.json())["VisibilityTimeout"] == 7:
                            pending.discard(url)
                await asyncio.sleep(0.1)
            took = time.monotonic() - t0
        assert not pending, f"{pending} never saw the PATCH"
        print(f"\nRiak ring: config PATCH reached every node in {took:.2f} s")

        async def faults(h: History) -> None:
            await asyncio.sleep(6.0)  # mid-consumption: producers and consumers both running
            await kill9_and_rejoin(ring, "dynaq-2", h, NAMES)

        workload = Workload(
            endpoints=endpoints,
            messages=600,
            duration_s=20.0,
            visibility_timeout_s=3.0,
            request_timeout_s=10.0,
            drain_max_s=120.0,
            seed=19,
        )
        t0 = time.monotonic()
        h = await run_workload(workload, faults)
        wall = time.monotonic() - t0
        assert all(n.alive() for n in ring.nodes)
    assert server_errors(h) == {}, h.responses
    await assert_verdict("riak ring: kill -9 mid-consumption", h, wall, artifacts=tmp_path, kills=1)


@pytest.mark.slow
async def test_riak_paused_for_five_seconds(tmp_path: Path, riak: RiakServer) -> None:
    async with run_cluster(
        3,
        "riak",
        riak_http=[riak.http],
        keyspace=new_prefix(),
        directory=tmp_path,
        timeout_s=90,
        env={"DYNAQ_RIAK_N_VAL": "1", "DYNAQ_RIAK_REQUEST_TIMEOUT_S": "3"},
    ) as ring:
        endpoints = [n.url for n in ring.nodes]
        beam = riak.pids[0]

        async def faults(h: History) -> None:
            await asyncio.sleep(4.0)
            f = h.fault("Riak SIGSTOP 5 s")
            os.kill(beam, signal.SIGSTOP)
            try:
                await asyncio.sleep(5.0)
            finally:
                os.kill(beam, signal.SIGCONT)
            f.ended = h.now()

        workload = Workload(
            endpoints=endpoints,
            messages=600,
            duration_s=15.0,
            visibility_timeout_s=3.0,
            request_timeout_s=15.0,
            drain_max_s=120.0,
            seed=23,
        )
        t0 = time.monotonic()
        h = await run_workload(workload, faults)
        wall = time.monotonic() - t0
        assert all(n.alive() for n in ring.nodes)
    # The outage showed as retriable 503s (or requests that waited it out), never a 500.
    assert server_errors(h) == {}, h.responses
    await assert_verdict("riak ring: Riak SIGSTOP 5 s", h, wall, artifacts=tmp_path)
