"""Cluster scaling and failover: N real nodes on one Cassandra, behind HAProxy, measured.

``python -m bench cluster [--nodes 1,3] [--messages M] [--concurrency C]
[--preset lan|local] [--cassandra HOST:PORT] [--direct] [--no-failover] [--seconds S]
[--enqueue-total] [--pin] [--idle-s S]``

For each ring size in ``--nodes`` (default ``1,3``: the same load on 1 and 3
nodes, one after the other, in one session):

1. **start**: N node processes (free 127.0.0.1 ports, one gossip secret,
   every node a seed of every other) on a fresh Cassandra keyspace, and
   Debian's HAProxy in front with ``config/haproxy.cfg``; the time until every
   node lists all N in ``/v1/status/servers``.
2. **enqueue**: M messages in v2 JSON batches of 100, C concurrent clients per
   node (``--enqueue-total``: C in all) through HAProxy (``--direct``:
   round-robin over the nodes themselves).
3. **receive + delete**: C clients per node through HAProxy, receiving 100 and
   deleting what they got, until all M are deleted.
4. **failover** on the largest ring (unless ``--no-failover``): kill -9 the
   last node, time until the survivors drop it (failure detection with
   ``--preset``), then restart it and time until every node lists it again.

Every phase reports msgs/s and request latency p50/p99 (measured wall
figures) and ``<phase>_cpu_us_per_msg``: the CPU µs per message each process
spent (every node's process tree, Cassandra's JVM, HAProxy, the client, and
``others``: the rest of the machine's busy time) over the steady part of the
timed phase, its first 90 % of messages (``..._whole``: the whole phase, with
the drain's tail, where one node's slice is empty first and its receivers poll
it), with what follows from it (bench/_cluster_model.py). The JSON line holds
the figures of the largest ring at the top level, every ring under
``by_nodes``, the measured scaling ratios largest/smallest, and
``projection``: the node-bound rates of the smallest and the largest ring if
each node had a core of its own, their ratio, and Cassandra's cap per core.
Cassandra is started for the run (dynaq/testing/servers/cassandra.py) unless
``--cassandra`` names one (its CPU is then counted if it listens on this
machine and is visible). Every loop is bounded by ``--seconds``.

What one 2-core machine can show: Cassandra, every node, HAProxy and the load
generator share two cores, so more nodes add parallel receivers (each serves
its own slice) but no CPU, and the wall ratios stay flat. CPU time per
message does not depend on who else holds the cores, hence the projection.
``--pin`` puts the nodes on the last CPU and everything else (Cassandra,
HAProxy, client) on the others, so a run whose node core is saturated shows
the node-bound rate of one core by wall clock too. ``--idle-s`` first samples
every process idle, to show the background (gossip, Cassandra's own work).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from bench._cluster_cpu import CpuMeter, listener_pid, pin
from bench._cluster_model import STEADY, project, summarize
from bench.common import Deadline, percentiles, progress, rate
from dynaq.testing.cluster import HaproxyProcess, LocalCluster, http_get, start_haproxy

BATCH = 100


async def _enqueue(
    urls: list[str],
    total: int,
    concurrency: int,
    deadline: Deadline,
    lat: list[float],
    on_done: Callable[[int], None],
) -> tuple[float, int]:
    """Enqueue ``total`` in batches; (seconds, messages enqueued: fewer if time ran out)."""
    batches = total // BATCH
    done = 0
    queue: asyncio.Queue[int] = asyncio.Queue()
    for b in range(batches):
        queue.put_nowait(b)
    t0 = time.monotonic()

    async def client(s: aiohttp.ClientSession) -> None:
        nonlocal done
        while not queue.empty() and not deadline.expired():
            b = queue.get_nowait()
            body = {"messages": [{"body": f"m{b * BATCH + i}"} for i in range(BATCH)]}
            t = time.monotonic()
            async with s.post(f"{urls[b % len(urls)]}/v2/queues/bench/messages", json=body) as r:
                r.raise_for_status()
                await r.read()
            lat.append((time.monotonic() - t) * 1000)
            done += BATCH
            on_done(done)

    async with aiohttp.ClientSession() as s:
        await asyncio.gather(*(client(s) for _ in range(concurrency)))
    return time.monotonic() - t0, done


async def _consume(
    urls: list[str],
    total: int,
    concurrency: int,
    deadline: Deadline,
    lat: list[float],
    on_done: Callable[[int], None],
) -> tuple[float, int, int, int]:
    """Receive 100 and delete them until ``total`` are deleted; (seconds, messages
    deleted: fewer if time ran out, receives that got messages, empty receives).

    Both counts explain the CPU per message: a receive that brings fewer than
    100 costs about as much as a full one, and an empty one (the node's own
    slice drained while others still hold messages) costs CPU too."""
    deleted = full = empty = 0
    t0 = time.monotonic()

    async def client(s: aiohttp.ClientSession, url: str) -> None:
        nonlocal deleted, full, empty
        while deleted < total and not deadline.expired():
            t = time.monotonic()
            async with s.post(
                f"{url}/v2/queues/bench/messages/receive", json={"max_messages": BATCH}
            ) as r:
                got = [m["id"] for m in (await r.json())["messages"]]
            if not got:
                empty += 1
                await asyncio.sleep(0.02)
                continue
            async with s.post(f"{url}/v2/queues/bench/messages/delete", json={"ids": got}) as r:
                r.raise_for_status()
                await r.read()
            lat.append((time.monotonic() - t) * 1000)
            deleted += len(got)
            full += 1
            on_done(deleted)

    async with aiohttp.ClientSession() as s:
        await asyncio.gather(*(client(s, u) for u in urls for _ in range(concurrency)))
    return time.monotonic() - t0, deleted, full, empty


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


def _pin_cpus(args: argparse.Namespace) -> tuple[set[int], set[int]] | None:
    """With ``--pin``: (the nodes' CPU, everyone else's CPUs), else ``None``."""
    if not args.pin:
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least 2 CPUs")
    return {cpus[-1]}, set(cpus[:-1])


def _meters(
    cluster: LocalCluster, lb: HaproxyProcess | None, cassandra_pid: int | None
) -> CpuMeter:
    procs: dict[str, int] = {}
    for n in cluster.nodes:
        assert n.proc.proc is not None
        procs[n.name] = n.proc.proc.pid
    if lb is not None:
        procs["haproxy"] = lb.proc.pid
    if cassandra_pid is not None:
        procs["cassandra"] = cassandra_pid
    return CpuMeter(procs, trees={n.name for n in cluster.nodes})


def _summary(phase: str, meter: CpuMeter, total: int, names: list[str]) -> dict[str, Any]:
    whole = meter.stop(total)
    return summarize(phase, meter.steady() or whole, whole, names)


def _phases(
    args: argparse.Namespace,
    cluster: LocalCluster,
    urls: list[str],
    meter: CpuMeter,
    deadline: Deadline,
) -> dict[str, Any]:
    """The two timed phases; wall figures and CPU per message of each."""
    out: dict[str, Any] = {}
    nodes = len(cluster.nodes)
    names = [n.name for n in cluster.nodes]
    if args.idle_s > 0:  # the background every process burns with no load
        meter.start()
        time.sleep(args.idle_s)
        out["idle_cores"] = meter.stop(0)[1]
    total = args.messages // BATCH * BATCH
    steady_at = max(BATCH, int(total * STEADY))

    def on_done(count: int) -> None:  # the steady window ends at STEADY of the phase
        if count >= steady_at:
            meter.mark(count)

    enq_lat: list[float] = []
    meter.start()
    # C clients per node, as for receiving: each node gets the same offered load in
    # every ring, so that its CPU per message compares (a node that sees fewer
    # concurrent batches coalesces less). --enqueue-total: C in all, as before.
    enq_clients = args.concurrency if args.enqueue_total else args.concurrency * nodes
    out["enqueue_clients"] = enq_clients
    enq_s, done = asyncio.run(_enqueue(urls, total, enq_clients, deadline, enq_lat, on_done))
    # Per message done: a phase cut short by --seconds must not look cheaper.
    out.update(_summary("enqueue", meter, done, names))
    out["enqueue_msgs_per_s"] = round(rate(done, enq_s))
    p = percentiles(enq_lat)
    out["enqueue_p50_ms"], out["enqueue_p99_ms"] = round(p["p50"], 2), round(p["p99"], 2)
    cpu = out["enqueue_cpu_us_per_msg"]
    progress(
        f"{nodes} nodes: enqueued {done} in {enq_s:.2f} s, p99 {p['p99']:.1f} ms; "
        f"CPU µs/msg nodes {cpu['nodes']}, cassandra {cpu.get('cassandra')}, "
        f"haproxy {cpu.get('haproxy')}, client {cpu['client']}, others {cpu['others']}"
    )
    # Receivers per node, through the balancer: every node serves its slice.
    con_lat: list[float] = []
    con_urls = urls * nodes if len(urls) == 1 else urls
    meter.start()
    con_s, deleted, full, empty = asyncio.run(
        _consume(con_urls, done, args.concurrency, deadline, con_lat, on_done)
    )
    out.update(_summary("receive_delete", meter, deleted, names))
    out["receive_delete_msgs_per_s"] = round(rate(deleted, con_s))
    out["receive_delete_msgs_per_receive"] = round(deleted / full, 1) if full else 0.0
    out["receive_delete_empty_receives"] = empty
    out["cut_short"] = done < total or deleted < done  # --seconds ran out: fewer figures
    p = percentiles(con_lat)
    out["receive_delete_p50_ms"] = round(p["p50"], 2)
    out["receive_delete_p99_ms"] = round(p["p99"], 2)
    cpu = out["receive_delete_cpu_us_per_msg"]
    progress(
        f"{nodes} nodes: received and deleted {deleted} in {con_s:.2f} s "
        f"({full} receives, {empty} empty); "
        f"CPU µs/msg nodes {cpu['nodes']}, cassandra {cpu.get('cassandra')}, "
        f"haproxy {cpu.get('haproxy')}, client {cpu['client']}, others {cpu['others']}"
    )
    return out


def _failover_figures(out: dict[str, Any]) -> dict[str, Any]:
    return {k: out[k] for k in ("failure_detection_s", "rejoin_s")}


def _one_ring(
    args: argparse.Namespace,
    tmp: Path,
    hosts: list[str],
    cassandra_pid: int | None,
    nodes: int,
    failover: bool,
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
    pinning = _pin_cpus(args)
    t0 = time.monotonic()
    with cluster:
        out["converge_s"] = round(time.monotonic() - t0, 3)
        progress(f"{nodes} nodes converged in {out['converge_s']} s")
        lb = None
        if not args.direct:
            lb = start_haproxy(ring_dir, [n.url.removeprefix("http://") for n in cluster.nodes])
        mine = os.sched_getaffinity(0)
        try:
            urls = cluster.urls if lb is None else [lb.url]
            out["via"] = "direct" if lb is None else "haproxy"
            meter = _meters(cluster, lb, cassandra_pid)
            if pinning is not None:
                node_cpus, rest = pinning
                for name, pid in meter.procs.items():
                    pin(pid, node_cpus if name in meter.trees else rest)
                pin(os.getpid(), rest, tree=False)  # the client
                out["pinned"] = {"nodes": sorted(node_cpus), "rest": sorted(rest)}
            _create_queue(cluster, deadline)
            out.update(_phases(args, cluster, urls, meter, deadline))
        finally:
            if pinning is not None:
                pin(os.getpid(), mine, tree=False)
            if lb is not None:
                lb.stop()
        if failover and nodes >= 2:
            out.update(_failover(cluster))
            progress(f"failover: {_failover_figures(out)}")
    return out


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    sizes = [int(n) for n in str(args.nodes).split(",") if n.strip()]
    if not sizes or min(sizes) < 1:
        raise SystemExit("--nodes takes ring sizes >= 1, e.g. 3 or 1,3")
    server = None
    hosts = [args.cassandra] if args.cassandra else []
    cassandra_pid = listener_pid(int(args.cassandra.rsplit(":", 1)[1])) if hosts else None
    if not hosts:
        from dynaq.testing.servers import cassandra as cassandra_server

        why = cassandra_server.available()
        if why is not None:
            raise SystemExit(f"bench cluster needs Cassandra: {why}")
        progress("starting Cassandra")
        server = cassandra_server.start_cassandra(tmp / "cassandra")
        hosts = [server.host]
        cassandra_pid = server.proc.pid
    by_nodes: dict[str, dict[str, Any]] = {}
    try:
        for n in sizes:
            failover = not args.no_failover and n == max(sizes)
            by_nodes[str(n)] = _one_ring(args, tmp, hosts, cassandra_pid, n, failover)
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
    result["projection"] = project(by_nodes)
    result["messages"] = args.messages
    result["cpus"] = len(os.sched_getaffinity(0))
    result["loadavg"] = Path("/proc/loadavg").read_text().split()[:3]
    return result


def main(argv: list[str]) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench cluster", description=__doc__)
    p.add_argument("--nodes", default="1,3", help="ring sizes to measure, e.g. 3 or 1,3")
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--concurrency", type=int, default=4, help="clients per node")
    p.add_argument("--preset", choices=("lan", "local"), default="lan")
    p.add_argument("--cassandra", help="host:port of a running Cassandra (else one is started)")
    p.add_argument(
        "--enqueue-total", action="store_true", help="C enqueue clients in all, not per node"
    )
    p.add_argument("--direct", action="store_true", help="skip HAProxy: clients hit the nodes")
    p.add_argument("--no-failover", action="store_true")
    p.add_argument("--seconds", type=float, default=300.0, help="bound on every load phase")
    p.add_argument(
        "--pin", action="store_true", help="nodes on the last CPU, the rest on the others"
    )
    p.add_argument(
        "--idle-s", type=float, default=2.0, help="sample every process idle first (0: skip)"
    )
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        return run(args, Path(tmp))
