"""Cluster scaling and failover: N real nodes on one Cassandra, measured.

``python -m bench cluster [--nodes N] [--messages M] [--concurrency C]
[--preset lan|local] [--cassandra HOST:PORT] [--no-failover] [--seconds S]``

1. **start**: N node processes (free 127.0.0.1 ports, one gossip secret,
   every node a seed of every other) on one Cassandra keyspace; the time until
   every node lists all N in ``/v1/status/servers``.
2. **enqueue**: M messages in v2 JSON batches of 100, C concurrent clients
   spread round-robin over the nodes (any node takes any write).
3. **receive + delete**: C clients per node, each receiving from its own node
   (so every node serves its slice) and deleting what it got; rate until all M
   are deleted.
4. **failover** (unless ``--no-failover``): kill -9 the last node, time until
   the survivors drop it (failure detection with ``--preset``), then restart
   it and time until every node lists it again (rejoin).

Cassandra is started for the run (tests/cassandra_server.py) unless
``--cassandra`` names one. Every loop is bounded by ``--seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import Deadline, progress, rate
from tests.cluster_harness import LocalCluster, http_get

BATCH = 100


async def _enqueue(urls: list[str], total: int, concurrency: int, deadline: Deadline) -> float:
    batches = total // BATCH
    queue: asyncio.Queue[int] = asyncio.Queue()
    for b in range(batches):
        queue.put_nowait(b)
    t0 = time.monotonic()

    async def client(s: aiohttp.ClientSession) -> None:
        while not queue.empty() and not deadline.expired():
            b = queue.get_nowait()
            body = {"messages": [{"body": f"m{b * BATCH + i}"} for i in range(BATCH)]}
            async with s.post(f"{urls[b % len(urls)]}/v2/queues/bench/messages", json=body) as r:
                r.raise_for_status()
                await r.read()

    async with aiohttp.ClientSession() as s:
        await asyncio.gather(*(client(s) for _ in range(concurrency)))
    return time.monotonic() - t0


async def _consume(urls: list[str], total: int, concurrency: int, deadline: Deadline) -> float:
    deleted = 0
    t0 = time.monotonic()

    async def client(s: aiohttp.ClientSession, url: str) -> None:
        nonlocal deleted
        while deleted < total and not deadline.expired():
            async with s.post(
                f"{url}/v2/queues/bench/messages/receive", json={"max_messages": BATCH}
            ) as r:
                got = [m["id"] for m in (await r.json())["messages"]]
            if not got:
                await asyncio.sleep(0.02)
                continue
            async with s.post(f"{url}/v2/queues/bench/messages/delete", json={"ids": got}) as r:
                r.raise_for_status()
                await r.read()
            deleted += len(got)

    async with aiohttp.ClientSession() as s:
        await asyncio.gather(*(client(s, u) for u in urls for _ in range(concurrency)))
    return time.monotonic() - t0


def _create_queue(cluster: LocalCluster, deadline: Deadline) -> None:
    req = urllib.request.Request(f"{cluster.nodes[0].url}/v1/queues/bench", method="PUT")
    urllib.request.urlopen(req, timeout=10).close()
    while not deadline.expired():  # every node loads the queue within the sync interval
        if all(http_get(f"{u}/v1/queues/bench")[0] == 200 for u in cluster.urls):
            return
        time.sleep(0.1)
    raise TimeoutError("queue config did not reach every node")


def _failover(cluster: LocalCluster) -> dict[str, float]:
    victim = cluster.nodes[-1]
    survivors = cluster.nodes[:-1]
    names = [n.name for n in cluster.nodes]
    victim.kill()
    detect_s = cluster.wait_converged([n.name for n in survivors], 60, on=survivors)
    t0 = time.monotonic()
    cluster.start_node(victim)
    cluster.wait_converged(names, 60)
    return {"failure_detection_s": round(detect_s, 3), "rejoin_s": round(time.monotonic() - t0, 3)}


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    deadline = Deadline(args.seconds)
    server = None
    hosts = [args.cassandra] if args.cassandra else []
    if not hosts:
        from tests import cassandra_server

        why = cassandra_server.available()
        if why is not None:
            raise SystemExit(f"bench cluster needs Cassandra: {why}")
        progress("starting Cassandra")
        server = cassandra_server.start_cassandra(tmp / "cassandra")
        hosts = [server.host]
    result: dict[str, Any] = {"scenario": "cluster", "nodes": args.nodes, "preset": args.preset}
    try:
        cluster = LocalCluster(
            tmp,
            args.nodes,
            backend="cassandra",
            cassandra_hosts=hosts,
            keyspace=f"bench{int(time.time())}",
            preset=args.preset,
            sync_interval_s=1.0,
        )
        t0 = time.monotonic()
        with cluster:
            result["converge_s"] = round(time.monotonic() - t0, 3)
            progress(f"{args.nodes} nodes converged in {result['converge_s']} s")
            _create_queue(cluster, deadline)
            total = args.messages // BATCH * BATCH
            enq_s = asyncio.run(_enqueue(cluster.urls, total, args.concurrency, deadline))
            result["enqueue_msgs_per_s"] = round(rate(total, enq_s))
            progress(f"enqueued {total} in {enq_s:.2f} s")
            con_s = asyncio.run(_consume(cluster.urls, total, args.concurrency, deadline))
            result["receive_delete_msgs_per_s"] = round(rate(total, con_s))
            progress(f"received and deleted {total} in {con_s:.2f} s")
            if not args.no_failover and args.nodes >= 2:
                result.update(_failover(cluster))
                progress(f"failover: {result}")
    finally:
        if server is not None:
            server.stop()
    result["messages"] = args.messages
    return result


def main(argv: list[str]) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench cluster", description=__doc__)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--concurrency", type=int, default=4, help="clients per node")
    p.add_argument("--preset", choices=("lan", "local"), default="lan")
    p.add_argument("--cassandra", help="host:port of a running Cassandra (else one is started)")
    p.add_argument("--no-failover", action="store_true")
    p.add_argument("--seconds", type=float, default=300.0, help="bound on every load phase")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        return run(args, Path(tmp))
