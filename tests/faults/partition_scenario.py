"""The network-partition run, executed inside namespace W by ``test_partition.py``.

``python -m tests.faults.partition_scenario --ns-p P --tmp DIR --out FILE``, run
as ``ip netns exec W ...``. Namespace W holds Cassandra, dynaq-1, dynaq-2 and
the workload; namespace P holds dynaq-3. Two veth pairs join them (made by the
test): ``cl`` (W 10.77.0.1 - P 10.77.0.2), the cluster link (gossip, hints,
Cassandra), and ``cli`` (W 10.78.0.1 - P 10.78.0.2), the client link, so
clients still reach dynaq-3 while it is cut off from its peers and the store.

The fault: ``ip link set cl down`` in W for a few seconds after the survivors
dropped dynaq-3, then up again, under the recorded workload. The verdict's
figures go to ``--out`` as JSON (the history too when it is not ok).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from dynaq.testing import Cluster, History, Workload, check, run_workload
from dynaq.testing.cluster import LocalCluster
from dynaq.testing.servers import cassandra as cassandra_server
from tests.faults.helpers import verdict_figures

W_CLUSTER, P_CLUSTER, P_CLIENT = "10.77.0.1", "10.77.0.2", "10.78.0.2"
NAMES = ["dynaq-1", "dynaq-2", "dynaq-3"]
HOLD_S = 6.0


def _link(state: str) -> None:
    subprocess.run(["ip", "link", "set", "cl", state], check=True, timeout=10)


def _cluster(tmp: Path, ns_p: str, cassandra_host: str) -> LocalCluster:
    local = LocalCluster(
        tmp, 3, backend="cassandra", cassandra_hosts=[cassandra_host], keyspace="partition"
    )
    seeds = []
    for n in local.nodes:
        inside_p = n.name == "dynaq-3"
        host = P_CLUSTER if inside_p else W_CLUSTER
        seeds.append(f"{host}:{n.gossip_port}")
        n.proc.env["DYNAQ_GOSSIP_HOST"] = host
        n.proc.env["DYNAQ_HTTP_HOST"] = "0.0.0.0" if inside_p else W_CLUSTER
        # Off loopback a node needs tokens unless told otherwise; these addresses
        # live only in the namespaces this test makes.
        n.proc.env["DYNAQ_AUTH_ALLOW_ANONYMOUS"] = "true"
        n.proc.env["DYNAQ_GOSSIP_ADVERTISE_HTTP"] = f"{host}:{n.proc.port}"
        n.proc.host = P_CLIENT if inside_p else W_CLUSTER
        if inside_p:
            n.proc.command_prefix = ["ip", "netns", "exec", ns_p]
    for n in local.nodes:
        n.proc.env["DYNAQ_GOSSIP_SEEDS"] = ",".join(seeds)
    return local


async def _scenario(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(args.tmp)
    server = await asyncio.to_thread(
        cassandra_server.start_cassandra, tmp / "cassandra", 180.0, host=W_CLUSTER
    )
    try:
        local = _cluster(tmp, args.ns_p, server.host)
        await asyncio.to_thread(local.start, 120.0)
        ring = Cluster(local)
        marks: dict[str, float] = {}
        try:
            victim = ring.node("dynaq-3")

            async def partition(h: History) -> None:
                await asyncio.sleep(4.0)
                f = h.fault("partition", "dynaq-3 cut from peers and store")
                await asyncio.to_thread(_link, "down")
                try:
                    survivors = [ring.node(n) for n in NAMES[:2]]
                    marks["detected_s"] = await asyncio.to_thread(
                        local.wait_converged, NAMES[:2], 30.0, survivors
                    )
                    await asyncio.sleep(HOLD_S)
                finally:
                    await asyncio.to_thread(_link, "up")
                t0 = time.monotonic()
                if not victim.alive():  # it stopped itself (writer slot lost): start it again
                    marks["victim_exited"] = 1.0
                    await ring.start("dynaq-3", timeout_s=60)
                await ring.wait_converged(NAMES, timeout_s=60)
                marks["healed_s"] = time.monotonic() - t0
                f.ended = h.now()

            workload = Workload(
                endpoints=[n.url for n in ring.nodes],
                messages=2_000,
                duration_s=15.0,
                visibility_timeout_s=3.0,
                request_timeout_s=5.0,
                drain_max_s=90.0,
                seed=31,
            )
            t0 = time.monotonic()
            h = await run_workload(workload, partition)
            wall = time.monotonic() - t0
            alive = all(n.alive() for n in ring.nodes)
            await ring.wait_converged(NAMES, timeout_s=30)
        finally:
            await asyncio.to_thread(local.stop)
    finally:
        await asyncio.to_thread(server.stop)
    v = check(h)
    out = verdict_figures(v, h, wall, **{k: round(x, 2) for k, x in marks.items()})
    out.update(ok=v.ok, examples=v.examples, all_alive_at_end=alive)
    if not v.ok:
        (tmp / "history.json").write_text(h.dump())
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.faults.partition_scenario")
    p.add_argument("--ns-p", required=True, help="the namespace dynaq-3 runs in")
    p.add_argument("--tmp", required=True, help="directory for logs and data")
    p.add_argument("--out", required=True, help="where the verdict's JSON goes")
    args = p.parse_args(argv)
    result = asyncio.run(_scenario(args))
    Path(args.out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
