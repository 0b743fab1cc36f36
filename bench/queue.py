"""Queue throughput and latency: a real dynaq node against NATS JetStream, side by side.

``python -m bench queue [--quick] [--messages N] [--seconds S] [--concurrency C] [--procs P]
[--client dynaq [--rounds R]] [--workers N]``

``--workers N`` runs the dynaq node with N worker processes (``http.workers``:
one port, one LMDB environment). With N > 1 a 1-worker node runs in the same
run too, each of its phases next to the N-worker one (before it in two phases,
after it in the other two), and the JSON line adds
``workers``, the 1-worker figures (``w1_*``), ``scaling_*`` = N-worker / 1-worker
rate, and the server's and client's cores in each (``server_cores_w1_*``,
``client_cores_w1_*``): on a 2-core machine the client's cores are cores the
node did not get. ``--layout own`` measures N independent processes on the one
port with an LMDB environment each instead (``bench/_own_envs.py``: an upper
bound for per-worker environments, not a configuration of dynaq). ``--tmp-dir /dev/shm`` runs everything on tmpfs (fsync is
free there): the CPU-bound case, where workers can show what they scale.

``--client dynaq`` adds each dynaq phase a second time through the client
library (``dynaq.client.AsyncClient``) right after the raw-HTTP one, and
reports ``client_ratio_*`` = library / raw (its single enqueue is v2's
one-message POST, the raw one v1's PUT). ``--rounds R`` splits each such pair
into R back-to-back pairs with alternating order and also reports the paired
ratios and their median (``client_ratio_*_rounds``, ``client_ratio_*_median``):
on a machine other loads share, that median is the figure to read.

Phases (dynaq, then the JetStream equivalent, alternating, so both see the
same machine noise); every body is 256 bytes:

1. **batched enqueue**: ``POST /v2/queues/{q}/messages`` msgpack batches of
   100, C connections / JetStream async publishes in windows of 100, every
   publish acknowledged by the server.
2. **receive + delete**: ``.../receive`` 100 then ``.../delete`` those ids /
   a durable pull consumer, ``fetch(100)`` then an explicit ack per message.
   Each consumes what phase 1 stored.
3. **single enqueue** at concurrency C: v1 ``PUT /v1/queues/{q}/message`` /
   ``js.publish`` (waits for the ack).
4. **round trip** at concurrency 1: latency of one single enqueue, p50/p99.

Phases 3 and 4 run a third time against a bare aiohttp server
(``bench/_floor_server.py``: same route, no store) with the same client code,
and the run measures one durable LMDB commit directly
(``bench/_queue_floor.py``): the JSON line reports these floors
(``floor_*``), dynaq's ratio to JetStream for every phase (``ratio_*``), and
whether the round trip's p50 is within fdatasync p50 (the median of three
probes: at the start, just before the round trips, at the end) + the bare
HTTP round trip p50 + 0.3 ms (``rtt_floor_ms``, ``rtt_within_floor``).
``client_cores_for_peer_single_rate`` is the CPU the HTTP client alone would
need to send single enqueues at the peer's rate (its CPU per request against
the bare server, times the peer's rate): on a 2-core box, a figure near 2 says
the single x16 target is out of reach for any HTTP server measured this way. Every phase
starts after a ``sync(2)``, so none pays for the write-back of another's
unsynced pages.

The load runs in P separate client processes (``bench/_queue_clients.py``,
multiprocessing spawn), so the client shares an event loop with nothing. The
client's and the servers' CPU are reported per phase (on a 2-core box, client
CPU is CPU the server did not get), and so is the disk's fsync latency. Rates count from the first request to the last useful
answer. Durability differs: dynaq answers after an fsync'd LMDB group commit;
JetStream 2.9 file storage answers after writing to the OS page cache (it
fsyncs on an interval, 2 min by default), and ``msg.ack()`` is not awaited by the client.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

from bench._nats import NatsServer, setup_nats
from bench._own_envs import OwnEnvs
from bench._queue_clients import (
    BATCH,
    BODY_BYTES,
    ClientPool,
    PhaseResult,
    Spec,
)
from bench._queue_floor import FloorServer, lmdb_commit_ms, settle_disk
from bench._queue_plan import (
    Options,
    combine,
    setup_queue,
    show,
    specs,
    split,
)
from bench._queue_summary import summary
from bench.common import (
    fsync_latency_ms,
    progress,
    start_node,
)

# --------------------------------------------------------------------------- options


def parse(argv: list[str]) -> Options:
    p = argparse.ArgumentParser(prog="python -m bench queue", description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=300_000, help="batched enqueue budget")
    p.add_argument("--single-messages", type=int, default=30_000, help="single enqueue budget")
    p.add_argument("--rtt-samples", type=int, default=3_000, help="round trips at concurrency 1")
    p.add_argument("--seconds", type=float, default=15.0, help="time bound of each phase")
    p.add_argument("--concurrency", type=int, default=16, help="connections in all")
    p.add_argument("--procs", type=int, default=2, help="client processes")
    p.add_argument("--no-peer", action="store_true", help="skip NATS JetStream")
    p.add_argument(
        "--client",
        choices=("raw", "dynaq"),
        default="raw",
        help="dynaq: also run every dynaq phase through the client library",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --client dynaq: run each raw/library pair this many times, alternating"
        " (the median of the paired ratios resists a shared machine's bursts)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes of the dynaq node (N > 1 also measures a 1-worker node)",
    )
    p.add_argument(
        "--layout",
        choices=("shared", "own"),
        default="shared",
        help="with --workers N > 1: shared = a node of N workers on one LMDB environment; "
        "own = N independent processes on one port, an environment each (an upper bound, "
        "not a configuration: bench/_own_envs.py)",
    )
    p.add_argument(
        "--tmp-dir",
        default="",
        help="where the run's files go (default: the system's temp dir; /dev/shm: no disk)",
    )
    p.add_argument("--quick", action="store_true", help="tiny smoke run (a few seconds)")
    p.add_argument(
        "--storage",
        default="",
        metavar="B1,B2,...",
        help="compare storage backends (embedded, cassandra, riak) instead; bench._queue_backends.py",
    )
    p.add_argument(
        "--node-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment for the dynaq node only (repeatable)",
    )
    a = p.parse_args(argv)
    env = dict(kv.split("=", 1) for kv in a.node_env)
    storage = [b.strip() for b in a.storage.split(",") if b.strip()]
    if a.quick:
        return Options(
            2_000,
            300,
            200,
            5.0,
            4,
            1,
            not a.no_peer,
            True,
            env,
            storage,
            a.client == "dynaq",
            max(1, a.rounds),
            a.tmp_dir,
            max(1, a.workers),
            a.layout,
        )
    procs = max(1, min(a.procs, a.concurrency))
    return Options(
        max(BATCH, a.messages),
        max(1, a.single_messages),
        max(1, a.rtt_samples),
        max(0.5, a.seconds),
        max(1, a.concurrency),
        procs,
        not a.no_peer,
        False,
        env,
        storage,
        a.client == "dynaq",
        max(1, a.rounds),
        a.tmp_dir,
        max(1, a.workers),
        a.layout,
    )


# --------------------------------------------------------------------------- the run


def main(argv: list[str]) -> dict[str, Any]:
    o = parse(argv)
    if o.storage:
        from bench._queue_backends import run

        return run(o, o.storage)
    tmp = Path(tempfile.mkdtemp(prefix="dynaq-bench-", dir=o.tmp_dir or None))
    node = None
    base = None  # the 1-worker node, when the node has more
    peer: NatsServer | None = None
    floor: FloorServer | None = None
    pool: ClientPool | None = None
    res: dict[str, PhaseResult] = {}
    runs: dict[str, list[PhaseResult]] = {}
    disk: dict[str, dict[str, float]] = {}
    try:
        node = (
            OwnEnvs(tmp, o.workers, o.node_env)
            if o.layout == "own" and o.workers > 1
            else start_node(tmp, **{**o.node_env, "DYNAQ_HTTP_WORKERS": str(o.workers)})
        )
        assert node.proc is not None
        for url in node.worker_urls() if isinstance(node, OwnEnvs) else [node.url]:
            asyncio.run(setup_queue(url))
        progress(
            f"dynaq node pid {node.proc.pid} at {node.url}, {o.workers} worker(s) "
            f"(data in {node.data_dir})"
        )
        if o.workers > 1:
            base = start_node(tmp, "bench-1w", **{**o.node_env, "DYNAQ_HTTP_WORKERS": "1"})
            assert base.proc is not None
            asyncio.run(setup_queue(base.url))
            progress(f"1-worker dynaq node pid {base.proc.pid} at {base.url} (the baseline)")
        if o.peer:
            peer = NatsServer(tmp)
            asyncio.run(setup_nats(peer.url))
            progress(f"nats-server -js pid {peer.pid} at {peer.url} (file storage)")
        floor = FloorServer(tmp)
        progress(f"bare aiohttp floor server pid {floor.pid} at {floor.url}")
        disk["before"] = fsync_latency_ms(tmp, 50 if o.quick else 200)
        disk["lmdb_commit"] = lmdb_commit_ms(tmp, 50 if o.quick else 200)
        pool = ClientPool(o.procs)
        progress(
            f"{o.procs} client process(es), {o.concurrency} connections, {BODY_BYTES}-byte bodies, "
            f"phases bounded to {o.seconds:g} s"
        )
        dq, c = node.url, o.concurrency
        # (result key, kind, server pid, budget, connections, round, rounds)
        phases: list[tuple[str, str, int, int, int, int, int]] = []
        for what, budget, conns in (
            ("batch", o.messages, c),
            ("consume", 0, c),
            ("single", o.single_messages, c),
            ("rtt", o.rtt_samples, 1),
        ):
            n = o.rounds if o.library and what != "rtt" else 1  # rtt: one latency sample set
            for r, share in enumerate(split(budget, n)):
                pair = [
                    (f"{sys}_{what}", f"{sys}_{what}", node.proc.pid, share, conns, r, n)
                    for sys in ("dq", "lb")
                ]
                if not o.library:
                    pair = pair[:1]
                elif (r + (what in ("consume", "rtt"))) % 2:
                    # The order alternates (and raw goes first in two phases, the
                    # library in the other two): a phase that runs second meets a
                    # node the first one warmed or left tombstones in.
                    pair.reverse()
                if base is not None and base.proc is not None:
                    one = (f"w1_{what}", f"dq_{what}", base.proc.pid, share, conns, r, n)
                    # The 1-worker node goes first in two phases of four, second
                    # in the others: neither meets only a disk the other dirtied.
                    pair = [one, *pair] if what in ("consume", "rtt") else [*pair, one]
                phases.extend(pair)
            phases.append((f"js_{what}", f"js_{what}", 0, budget, conns, 0, 1))
            if what in ("single", "rtt"):
                # The same client against bare aiohttp: the HTTP floor, this run.
                phases.append((f"fl_{what}", f"dq_{what}", floor.pid, budget, conns, 0, 1))
        labels = {
            "batch": f"enqueue, batches of {BATCH}",
            "consume": "receive+delete / consume+ack",
            "single": f"single enqueue x{c}",
            "rtt": "single round trip x1",
        }
        for key, kind, pid, budget, conns, r, n in phases:
            system, what = key.split("_", 1)
            if system == "js":
                if peer is None:
                    continue
                pid, target = peer.pid, peer.url
            elif system == "fl":
                target = floor.url
            elif system == "w1" and base is not None:
                target = base.url
            else:
                target = dq
            if what == "consume":
                # Consume exactly what the (same system's) batch phase stored.
                budget = split(sum(x.count for x in runs[f"{system}_batch"]), n)[r]
            plan = specs(kind, target, o, pool, budget, conns)
            if what == "rtt":
                plan = [Spec(kind, target, 1, budget, budget, o.seconds)] + [
                    Spec(kind, target, 1, 0, 0, o.seconds) for _ in plan[1:]
                ]
            settle_disk()
            if key == "dq_rtt" and r == 0:
                # The disk's speed right now is the round trip's floor.
                disk["rtt"] = fsync_latency_ms(tmp, 50 if o.quick else 200)
            got = pool.run(plan, pid)
            runs.setdefault(key, []).append(got)
            res[key] = combine(runs[key])
            who = {
                "dq": "dynaq" if o.workers == 1 else f"dynaq {o.workers} workers",
                "lb": "dynaq.client",
                "js": "jetstream",
                "fl": "bare aiohttp",
                "w1": "dynaq 1 worker",
            }[system]
            show(f"{who} {labels[what]}" + (f" ({r + 1}/{n})" if n > 1 else ""), got)
        disk["after"] = fsync_latency_ms(tmp, 50 if o.quick else 200)
        progress(
            f"one durable LMDB commit of one put (two flushes: data, then meta): p50 "
            f"{disk['lmdb_commit']['p50']:.2f} ms, p99 {disk['lmdb_commit']['p99']:.2f} ms"
        )
        for when in ("before", "after"):
            d = disk[when]
            progress(
                f"disk {when}: write+fdatasync p50 {d['p50']:.2f} ms, p99 {d['p99']:.2f} ms"
                " (dynaq acks after an fsync'd commit; JetStream 2.9 does not fsync per message)"
            )
    finally:
        if pool is not None:
            pool.close()
        if peer is not None:
            peer.stop()
        if floor is not None:
            floor.stop()
        for server in (node, base):
            if server is not None:
                try:
                    server.terminate()
                except Exception:  # noqa: BLE001 - cleanup must reach the rmtree
                    server.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return summary(o, res, disk, runs)
