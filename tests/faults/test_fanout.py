"""Atomic fanout under faults: a topic publish reaches all of its queues or none.

Producers publish to a topic subscribed by three queues while nodes are killed
with ``kill -9``; a consumer per queue drains it. :func:`check_fanout` fails the
run on any acknowledged message missing from one of its queues and on any
message that reached some queues but not all (a publish whose answer was lost
may have landed, but only whole). With subscription filters (on attributes
and on the JSON body) each message must reach exactly the queues an oracle
written here in plain Python picks, and no other.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from dynaq.testing import History, run_cluster, run_node
from dynaq.testing.fanout import FanoutFaults, FanoutWorkload, Filter, Sample, run_fanout
from dynaq.testing.fanout_history import FanoutHistory, check_fanout
from dynaq.testing.runners import NodeServer
from dynaq.testing.servers.cassandra import CassandraServer
from tests.faults.helpers import kill9_and_rejoin
from tests.fixtures.cassandra import new_keyspace

NAMES = ["dynaq-1", "dynaq-2", "dynaq-3"]


def _eu_order_over_100(s: Sample) -> bool:
    order = s.body["order"]
    return bool(order["total"] > 100 and str(order["region"]).startswith("eu-"))


# fanout-a takes everything; b filters on an attribute, c on the JSON body.
FILTERS = {
    "fanout-b": Filter(
        {"colour": ["red", "blue"]},
        "attributes",
        lambda s: s.attributes["colour"] in ("red", "blue"),
    ),
    "fanout-c": Filter(
        {"order": {"total": [{"numeric": [">", 100]}], "region": [{"prefix": "eu-"}]}},
        "body",
        _eu_order_over_100,
    ),
}


async def _published(h: History, n: int) -> None:
    """Wait until ``n`` publishes were acknowledged (bounded: 60 s)."""
    deadline = time.monotonic() + 60
    while h.responses["publish 200"] < n:
        assert time.monotonic() < deadline, f"only {h.responses['publish 200']} publishes"
        await asyncio.sleep(0.01)


def _kills_while_publishing(node: NodeServer, times: int) -> FanoutFaults:
    """kill -9 and restart ``node`` ``times`` times, each while producers publish:
    after a set number of acknowledged publishes, not after a time the machine's
    speed decides."""

    async def faults(h: History) -> None:
        for k in range(times):
            await _published(h, 150 * (k + 1))
            f = h.fault("kill -9", node.name)
            await node.kill()
            await node.start(timeout_s=60)
            f.ended = h.now()

    return faults


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
    assert v.misrouted == 0, f"{name}: messages in queues whose filter refuses them: {v.examples}"
    assert v.wrong_answers == 0, f"{name}: answers naming the wrong queues: {v.examples}"


async def test_fanout_stays_whole_through_kill9_of_a_single_node(tmp_path: Path) -> None:
    async with run_node(directory=tmp_path) as node:
        t0 = time.monotonic()
        # Enough messages that the kills land while producers publish.
        workload = FanoutWorkload(endpoints=[node.url], messages=8_000, seed=31)
        fh = await run_fanout(workload, _kills_while_publishing(node, 3))
        wall = time.monotonic() - t0
    assert len(fh.history.faults) == 3
    assert fh.history.responses["publish exc"] > 0, "no kill landed during a publish"
    await _assert_whole("single node: fanout, kill -9 three times", fh, wall, tmp_path)


async def test_filtered_fanout_routes_exactly_through_kill9_of_a_single_node(
    tmp_path: Path,
) -> None:
    """Attribute and body filters are decided inside the publish's one store batch:
    through kill -9, each message is in exactly the queues whose filters take it."""
    async with run_node(directory=tmp_path) as node:
        t0 = time.monotonic()
        # Enough messages that both kills land while producers publish.
        workload = FanoutWorkload(endpoints=[node.url], messages=8_000, seed=33, filters=FILTERS)
        fh = await run_fanout(workload, _kills_while_publishing(node, 2))
        wall = time.monotonic() - t0
    assert len(fh.history.faults) == 2
    assert fh.history.responses["publish exc"] > 0, "no kill landed during a publish"
    # The oracle's split must leave each filtered queue some messages and refuse it others.
    routed = [q for p in fh.publishes for qs in p.routes.values() for q in qs]
    tokens = sum(len(p.tokens) for p in fh.publishes)
    for q in FILTERS:
        assert 0 < routed.count(q) < tokens, (q, routed.count(q), tokens)
    await _assert_whole("single node: filtered fanout, kill -9 twice", fh, wall, tmp_path)


async def test_fanout_stays_whole_through_kill9_in_a_ring(
    tmp_path: Path, cassandra: CassandraServer
) -> None:
    """Each queue's copy lands in another Cassandra partition (a LOGGED batch): the
    batchlog must make a publish whole even when the coordinating node dies, and
    the filters route each message to exactly its queues."""
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
        workload = FanoutWorkload(
            endpoints=[n.url for n in ring.nodes], messages=1_200, seed=32, filters=FILTERS
        )
        fh = await run_fanout(workload, faults)
        wall = time.monotonic() - t0
    await _assert_whole("ring: fanout, kill -9 of two nodes in turn", fh, wall, tmp_path)
