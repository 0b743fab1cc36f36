"""Chaos soak: kill -9 a node every few seconds under load, then judge the whole history.

``python -m bench chaos [--duration S] [--interval S] [--storage embedded|cassandra]
[--cassandra HOST:PORT] [--messages M] [--producers P] [--consumers C] [--seed N]
[--dir DIR]``

* ``--storage embedded`` (default): one node on LMDB, killed with SIGKILL
  every ``--interval`` seconds and restarted on the same port and data dir.
* ``--storage cassandra``: a 3-node ring on one Cassandra keyspace (a
  Cassandra is started for the run unless ``--cassandra`` names one); the
  nodes are killed in turn, each restarted once the survivors dropped it.

Producers and consumers run :func:`dynaq.testing.run_workload` throughout
(unique tokens, message groups, dedup retries, a fifth of sends as exact
batches whose completions the nodes publish to a topic, rotating over the
endpoints) for ``--duration`` seconds; then the faults stop, consumers drain
the queue, and :func:`dynaq.testing.check` reads the history. The JSON line
holds the verdict (``acked``, ``lost``, ``duplicates`` and their causes,
order, dedup and id-reuse violations, ``batches`` due to complete,
``batches_completed`` exactly once, ``batch_violations``), the number of
kills and the times. The process
exits 1 when the verdict is not ok (``python -m bench`` turns ``"ok": false``
into the exit code). Every loop is bounded by ``--duration`` and the drain
by ``--drain-max``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench.common import progress
from dynaq.testing import History, Workload, check, run_cluster, run_node, run_workload

COMPLETION_TOPIC = "batch-done"
"""The nodes publish batch completions here; the workload counts each batch's events."""


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench chaos", description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=float, default=120.0, help="seconds of load and kills")
    p.add_argument("--interval", type=float, default=5.0, help="seconds between kills")
    p.add_argument("--storage", choices=("embedded", "cassandra"), default="embedded")
    p.add_argument("--cassandra", help="host:port of a running Cassandra (else one is started)")
    p.add_argument("--messages", type=int, default=1_000_000, help="most messages sent")
    p.add_argument(
        "--rate",
        type=float,
        default=None,
        help="most messages/s sent (default: 400 embedded, 100 cassandra); 0 = unpaced",
    )
    p.add_argument("--producers", type=int, default=4)
    p.add_argument("--consumers", type=int, default=4)
    p.add_argument("--visibility-timeout", type=float, default=5.0)
    p.add_argument("--drain-max", type=float, default=180.0, help="longest drain, seconds")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--dir", help="keep the nodes' data and logs here (default: a temp dir)")
    a = p.parse_args(argv)
    if a.duration <= 0 or a.interval <= 0:
        p.error("--duration and --interval must be positive")
    if a.rate is None:  # below what consumers sustain here under kills, so drains end
        a.rate = 400.0 if a.storage == "embedded" else 100.0
    return a


class _Target:
    """What the kills hit: one node, or the nodes of a ring in turn."""

    def __init__(self, endpoints: list[str]) -> None:
        self.endpoints = endpoints
        self.kills = 0
        self.restart_s: list[float] = []

    async def kill_and_restart(self, h: History) -> None:
        raise NotImplementedError


class _OneNode(_Target):
    def __init__(self, node: Any) -> None:
        super().__init__([node.url])
        self.node = node

    async def kill_and_restart(self, h: History) -> None:
        f = h.fault("kill -9", self.node.name)
        await self.node.kill()
        self.kills += 1
        t0 = time.monotonic()
        await self.node.start(timeout_s=60)
        self.restart_s.append(time.monotonic() - t0)
        f.ended = h.now()


class _Ring(_Target):
    def __init__(self, ring: Any) -> None:
        super().__init__([n.url for n in ring.nodes])
        self.ring = ring
        self.names = [n.name for n in ring.nodes]

    async def kill_and_restart(self, h: History) -> None:
        name = self.names[self.kills % len(self.names)]
        f = h.fault("kill -9", name)
        await self.ring.kill(name)
        self.kills += 1
        t0 = time.monotonic()
        await self.ring.wait_converged([n for n in self.names if n != name], timeout_s=30)
        await self.ring.start(name, timeout_s=60)
        await self.ring.wait_converged(self.names, timeout_s=30)
        self.restart_s.append(time.monotonic() - t0)
        f.ended = h.now()


@contextlib.asynccontextmanager
async def _target(a: argparse.Namespace, tmp: Path) -> AsyncIterator[_Target]:
    if a.storage == "embedded":
        async with run_node(
            directory=tmp, name="chaos-1", batches_completion_topic=COMPLETION_TOPIC
        ) as node:
            yield _OneNode(node)
        return
    hosts = [a.cassandra] if a.cassandra else None
    if hosts is None:
        progress("starting Cassandra")
    async with run_cluster(
        3,
        "cassandra",
        cassandra_hosts=hosts,
        keyspace=f"chaos_{int(time.time())}",
        directory=tmp,
        timeout_s=120,
        batches_completion_topic=COMPLETION_TOPIC,
    ) as ring:
        yield _Ring(ring)


async def _run(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    async with _target(a, tmp) as target:
        progress(
            f"{a.storage}: {len(target.endpoints)} node(s) up; load and kills for {a.duration:g} s"
        )
        end = time.monotonic() + a.duration

        async def faults(h: History) -> None:
            while time.monotonic() + a.interval < end:
                await asyncio.sleep(a.interval)
                await target.kill_and_restart(h)
                progress(f"kill {target.kills}: back after {target.restart_s[-1]:.1f} s")
            await asyncio.sleep(max(0.0, end - time.monotonic()))

        workload = Workload(
            endpoints=target.endpoints,
            queue="chaos",
            producers=a.producers,
            consumers=a.consumers,
            messages=a.messages,
            duration_s=a.duration,
            visibility_timeout_s=a.visibility_timeout,
            drain_max_s=a.drain_max,
            seed=a.seed,
            max_rate_per_s=a.rate or None,
            completion_topic=COMPLETION_TOPIC,
        )
        t0 = time.monotonic()
        h = await run_workload(workload, faults)
        wall = time.monotonic() - t0
        kills, restart_s = target.kills, target.restart_s
    v = check(h)
    progress(f"verdict: {'ok' if v.ok else 'NOT OK'}, acked {v.acked}, lost {v.lost}")
    return {
        "scenario": "chaos",
        "storage": a.storage,
        **v.figures(),
        "kills": kills,
        "restart_max_s": round(max(restart_s, default=0.0), 2),
        "duration_s": a.duration,
        "interval_s": a.interval,
        "wall_s": round(wall, 1),
        "drained": h.drained,
        "rate_limit_per_s": a.rate or None,
        "acked_per_s": round(v.acked / wall, 1) if wall > 0 else 0.0,
        "responses": dict(sorted(h.responses.items())),
        "examples": v.examples,
    }


def main(argv: list[str]) -> dict[str, Any]:
    a = parse(argv)
    if a.dir:
        Path(a.dir).mkdir(parents=True, exist_ok=True)
        return asyncio.run(_run(a, Path(a.dir)))
    with tempfile.TemporaryDirectory(prefix="bench-chaos-") as tmp:
        return asyncio.run(_run(a, Path(tmp)))
