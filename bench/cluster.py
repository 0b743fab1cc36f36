"""Cluster scaling and failover: N real nodes on one Cassandra, behind HAProxy, measured.

``python -m bench cluster [--nodes 1,3] [--messages M] [--concurrency C]
[--preset lan|local] [--cassandra HOST:PORT] [--direct] [--no-failover] [--seconds S]``

For each ring size in ``--nodes`` (default ``1,3``: the same load on 1 and 3
nodes, one after the other, in one session):

1. **start**: N node processes (free 127.0.0.1 ports, one gossip secret,
   every node a seed of every other) on a fresh Cassandra keyspace, and
   Debian's HAProxy in front with ``config/haproxy.cfg``; the time until every
   node lists all N in ``/v1/status/servers``.
2. **enqueue**: M messages in v2 JSON batches of 100, C concurrent clients
   through HAProxy (``--direct``: round-robin over the nodes themselves).
3. **receive + delete**: C clients per node through HAProxy, receiving 100 and
   deleting what they got, until all M are deleted.
4. **failover** on the largest ring (unless ``--no-failover``): kill -9 the
   last node, time until the survivors drop it (failure detection with
   ``--preset``), then restart it and time until every node lists it again.

Every phase reports msgs/s and request latency p50/p99; the JSON line holds
the figures of the largest ring at the top level, every ring under
``by_nodes`` and the scaling ratios largest/smallest. Cassandra is started
for the run (dynaq/testing/servers/cassandra.py) unless ``--cassandra`` names one.
Every loop is bounded by ``--seconds``.

What one 2-core machine can show: Cassandra, every node, HAProxy and the load
generator share two cores, so more nodes add parallel receivers (each serves
its own slice) but no CPU; the ratios say how the design scales when the
cores are not the limit only as far as the cores allow.
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

from bench.common import Deadline, percentiles, progress, rate
from dynaq.testing.cluster import LocalCluster, http_get, start_haproxy

BATCH = 100


async def _enqueue(
    urls: list[str], total: int, concurrency: int, deadline: Deadline, lat: list[float]
) -> float:
    batches = total // BATCH
    queue: asyncio.Queue[int] = asyncio.Queue()
    for b in range(batches):
        queue.put_nowait(b)
    t0 = time.monotonic()

    async def client(s: aiohttp.ClientSession) -> None:
        while not queue.empty() and not deadline.expired():
            b = queue.get_nowait()
            body = {"messages": [{"body": f"m{b * BATCH + i}"} for i in range(BATCH)]}
            t = time.monotonic()
            async with s.post(f"{urls[b % len(urls)]}/v2/queues/bench/messages", json=body) as r:
                r.raise_for_status()
                await r.read()
            lat.append((time.monotonic() - t) * 1000)

    async with aiohttp.ClientSession() as s:
        await asyncio.gather(*(client(s) for _ in range(concurrency)))
    return time.monotonic() - t0


async def _consume(
    urls: list[str], total: int, concurrency: int, deadline: Deadline, lat: list[float]
) -> float:
    deleted = 0
    t0 = time.monotonic()

    async def client(s: aiohttp.ClientSession, url: str) -> None:
        nonlocal deleted
        while deleted < total and not deadline.expired():
            t = time.monotonic()
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
            lat.append((time.monotonic() - t) * 1000)
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


def _one_ring(
    args: argparse.Namespace, tmp: Path, hosts: list[str], nodes: int, failover: bool
) -> dict[str, Any]:
    deadline = Deadline(args.seconds)
    out: dict[str, Any] = {"nodes": nodes}
    ring_dir = tmp / f"ring{nodes}"
    ring_dir.mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster(
        ring_dir,
        nodes,
        backend="cassandra",
        cassandra_hosts=hosts,
        keyspace=f"bench{nodes}_{int(time.time())}",
        preset=args.preset,
        sync_interval_s=1.0,
    )
    t0 = time.monotonic()
    with cluster:
        out["converge_s"] = round(time.monotonic() - t0, 3)
        progress(f"{nodes} nodes converged in {out['converge_s']} s")
        lb = None
        if not args.direct:
            lb = start_haproxy(ring_dir, [n.url.removeprefix("http://") for n in cluster.nodes])
        try:
            urls = cluster.urls if lb is None else [lb.url]
            out["via"] = "direct" if lb is None else "haproxy"
            _create_queue(cluster, deadline)
            total = args.messages // BATCH * BATCH
            enq_lat: list[float] = []
            enq_s = asyncio.run(_enqueue(urls, total, args.concurrency, deadline, enq_lat))
            out["enqueue_msgs_per_s"] = round(rate(total, enq_s))
            p = percentiles(enq_lat)
            out["enqueue_p50_ms"], out["enqueue_p99_ms"] = round(p["p50"], 2), round(p["p99"], 2)
            progress(f"{nodes} nodes: enqueued {total} in {enq_s:.2f} s, p99 {p['p99']:.1f} ms")
            # Receivers per node, through the balancer: every node serves its slice.
            con_lat: list[float] = []
            con_urls = urls * nodes if lb is not None else urls
            con_s = asyncio.run(_consume(con_urls, total, args.concurrency, deadline, con_lat))
            out["receive_delete_msgs_per_s"] = round(rate(total, con_s))
            p = percentiles(con_lat)
            out["receive_delete_p50_ms"] = round(p["p50"], 2)
            out["receive_delete_p99_ms"] = round(p["p99"], 2)
            progress(f"{nodes} nodes: received and deleted {total} in {con_s:.2f} s")
        finally:
            if lb is not None:
                lb.stop()
        if failover and nodes >= 2:
            out.update(_failover(cluster))
            progress(f"failover: {out}")
    return out


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    sizes = [int(n) for n in str(args.nodes).split(",") if n.strip()]
    if not sizes or min(sizes) < 1:
        raise SystemExit("--nodes takes ring sizes >= 1, e.g. 3 or 1,3")
    server = None
    hosts = [args.cassandra] if args.cassandra else []
    if not hosts:
        from dynaq.testing.servers import cassandra as cassandra_server

        why = cassandra_server.available()
        if why is not None:
            raise SystemExit(f"bench cluster needs Cassandra: {why}")
        progress("starting Cassandra")
        server = cassandra_server.start_cassandra(tmp / "cassandra")
        hosts = [server.host]
    by_nodes: dict[str, dict[str, Any]] = {}
    try:
        for n in sizes:
            failover = not args.no_failover and n == max(sizes)
            by_nodes[str(n)] = _one_ring(args, tmp, hosts, n, failover)
    finally:
        if server is not None:
            server.stop()
    largest, smallest = by_nodes[str(max(sizes))], by_nodes[str(min(sizes))]
    result: dict[str, Any] = {"scenario": "cluster", "preset": args.preset, **largest}
    result["by_nodes"] = by_nodes
    if len(by_nodes) > 1:
        for figure in ("enqueue_msgs_per_s", "receive_delete_msgs_per_s"):
            base = smallest[figure]
            result[f"scaling_{figure}"] = round(largest[figure] / base, 2) if base else 0.0
    result["messages"] = args.messages
    return result


def main(argv: list[str]) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench cluster", description=__doc__)
    p.add_argument("--nodes", default="1,3", help="ring sizes to measure, e.g. 3 or 1,3")
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--concurrency", type=int, default=4, help="clients per node")
    p.add_argument("--preset", choices=("lan", "local"), default="lan")
    p.add_argument("--cassandra", help="host:port of a running Cassandra (else one is started)")
    p.add_argument("--direct", action="store_true", help="skip HAProxy: clients hit the nodes")
    p.add_argument("--no-failover", action="store_true")
    p.add_argument("--seconds", type=float, default=300.0, help="bound on every load phase")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        return run(args, Path(tmp))
