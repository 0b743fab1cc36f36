"""Atomic fanout under faults: a topic publish reaches all of its queues or none.

Producers publish to a topic subscribed by three queues while nodes are killed
with ``kill -9``; a consumer per queue drains it. :func:`check_fanout` fails the
run on any acknowledged message missing from one of its queues and on any
message that reached some queues but not all (a publish whose answer was lost
may have landed, but only whole).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from dynaq.testing import History, run_cluster, run_node
from dynaq.testing.fanout import FanoutHistory, FanoutWorkload, check_fanout, run_fanout
from dynaq.testing.servers.cassandra import CassandraServer
from tests.faults.helpers import kill9_and_rejoin
from tests.fixtures.cassandra import new_keyspace

NAMES = ["dynaq-1", "dynaq-2", "dynaq-3"]


async def _assert_whole(name: str, fh: FanoutHistory, wall_s: float, artifacts: Path) -> None:
    v = check_fanout(fh)
    if not v.ok:
        await asyncio.to_thread((artifacts / "fanout-history.json").write_text, fh.dump())
    figures = {
        "fault": name,
        **v.as_dict(),
        "faults": len(fh.history.faults),
        "responses": dict(sorted(fh.history.responses.items())),
        "drained": fh.drained,
        "wall_s": round(wall_s, 1),
    }
    print(f"\nFAULT-RESULT {json.dumps(figures)}")
    assert v.acked > 0, figures
    assert v.lost == 0, f"{name}: acknowledged copies lost: {v.examples}"
    assert v.partial == 0, f"{name}: messages in some queues only: {v.examples}"


async def test_fanout_stays_whole_through_kill9_of_a_single_node(tmp_path: Path) -> None:
    async with run_node(directory=tmp_path) as node:

        async def faults(h: History) -> None:
            for _ in range(3):
                await asyncio.sleep(2.0)
                f = h.fault("kill -9", node.name)
                await node.kill()
                await node.start(timeout_s=60)
                f.ended = h.now()

        t0 = time.monotonic()
        fh = await run_fanout(FanoutWorkload(endpoints=[node.url], seed=31), faults)
        wall = time.monotonic() - t0
    assert len(fh.history.faults) == 3
    await _assert_whole("single node: fanout, kill -9 three times", fh, wall, tmp_path)


async def test_fanout_stays_whole_through_kill9_in_a_ring(
    tmp_path: Path, cassandra: CassandraServer
) -> None:
    """Each queue's copy lands in another Cassandra partition (a LOGGED batch): the
    batchlog must make a publish whole even when the coordinating node dies."""
    async with run_cluster(
        3,
        "cassandra",
        cassandra_hosts=[cassandra.host],
        keyspace=new_keyspace(),
        directory=tmp_path,
        timeout_s=90,
    ) as ring:

        async def faults(h: History) -> None:
            for name in ("dynaq-2", "dynaq-3"):
                await asyncio.sleep(3.0)
                await kill9_and_rejoin(ring, name, h, NAMES)

        t0 = time.monotonic()
        workload = FanoutWorkload(endpoints=[n.url for n in ring.nodes], messages=1_200, seed=32)
        fh = await run_fanout(workload, faults)
        wall = time.monotonic() - t0
    await _assert_whole("ring: fanout, kill -9 of two nodes in turn", fh, wall, tmp_path)
