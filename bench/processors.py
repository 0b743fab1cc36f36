"""Processors (``dynaq worker``): throughput of each delivery strategy, side by side
in one run, against a hand-written consume loop; and crash runs with a checker.

``python -m bench processors [--entries N] [--crash-runs K] [--crash-entries M]
[--seconds S] [--quick]``

1. **Strategies.** For each of ``exactly_once``, ``at_least_once`` and
   ``at_most_once`` a real ``dynaq worker`` process runs one transform
   (:mod:`bench._processor_graphs`) over its own input stream, preloaded with N
   entries of ~256 bytes, into its own output stream. The rate counts from the
   first output to the last (the worker's start-up is not in it). One step reads
   one entry, as Cues does.
2. **Yardstick: a hand-written loop** over queues, the same per-message work
   without any delivery guarantee beyond at-least-once: ``receive 1 → enqueue 1
   → delete 1`` (:class:`dynaq.client.AsyncClient`, one connection, as one
   processor has one), over N preloaded messages. ``ratio_*_vs_plain_loop``.
3. **Crash runs** of the README's example (``examples.processors.pipeline``):
   its input preloaded with M entries, a worker started and SIGKILLed at a random
   moment K times, then one left to finish; the checker counts, for every input,
   its outputs plus its handled errors: ``lost`` (none), ``duplicated`` (more
   than one). ``ok`` is false unless both are 0.

The last stdout line is the JSON result. Machines differ 2-4x between sessions:
read the ratios. All three strategies and the loop run against one node,
minutes apart at most, so they share the machine's noise.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._processor_graphs import streams
from bench.common import Deadline, process_cpu_s, progress, rate, start_node
from dynaq.client import AsyncClient
from dynaq.testing.process import NodeProcess

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES = ("exactly_once", "at_least_once", "at_most_once")
_PAD = "x" * 240
_APPEND_BATCH = 500


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench processors")
    p.add_argument("--entries", type=int, default=3000, help="inputs per strategy")
    p.add_argument("--crash-runs", type=int, default=12, help="SIGKILLed workers")
    p.add_argument("--crash-entries", type=int, default=600, help="inputs of the crash runs")
    p.add_argument("--seconds", type=float, default=120.0, help="time bound of each phase")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--quick", action="store_true", help="tiny smoke run")
    a = p.parse_args(argv)
    if a.quick:
        a.entries, a.crash_runs, a.crash_entries, a.seconds = 300, 3, 120, 60.0
    return a


def _worker(node: NodeProcess, target: str, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
    env.update({"DYNAQ_ENDPOINT": node.url, "DYNAQ_LOG_LEVEL": "warning", "PYTHONUNBUFFERED": "1"})
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "dynaq", "worker", target],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def _preload(client: AsyncClient, stream: str, first: int, count: int) -> None:
    for lo in range(first, first + count, _APPEND_BATCH):
        hi = min(first + count, lo + _APPEND_BATCH)
        await client.append(stream, [{"n": n, "pad": _PAD} for n in range(lo, hi)])


async def _ensure_stream(client: AsyncClient, name: str) -> None:
    if name not in {s.name for s in await client.list_streams()}:
        await client.declare_stream(name, {"type": "object"})


async def _strategy(
    client: AsyncClient, node: NodeProcess, strategy: str, n: int, seconds: float, logs: Path
) -> dict[str, float]:
    src, out = streams(strategy)
    for name in (src, out):
        await _ensure_stream(client, name)
    await _preload(client, src, 0, n)
    proc = _worker(node, f"bench._processor_graphs:{strategy}", logs / f"{strategy}.log")
    deadline = Deadline(seconds)
    t0 = first = 0.0
    try:
        while not deadline.expired():
            size = await client.stream_size(out)
            now = time.monotonic()
            if size and not t0:
                t0, first = now, size
            if size >= n:
                break
            if proc.poll() is not None:
                raise RuntimeError(f"the {strategy} worker exited: {proc.returncode}")
            await asyncio.sleep(0.02)
        else:
            raise RuntimeError(f"{strategy}: {size} of {n} outputs in {seconds:.0f} s")
        elapsed = time.monotonic() - t0
        cpu = process_cpu_s(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 30)
    return {"msgs_per_s": rate(n - first, elapsed), "worker_cpu_s": round(cpu, 2)}


async def _plain_loop(client: AsyncClient, n: int, seconds: float) -> dict[str, float]:
    """receive 1 → enqueue 1 → delete 1, one connection, over ``n`` preloaded messages."""
    await client.create_queue("pb-plain-in")
    await client.create_queue("pb-plain-out")
    for lo in range(0, n, 100):
        await client.enqueue("pb-plain-in", [_PAD + str(i) for i in range(lo, min(n, lo + 100))])
    done = 0
    deadline = Deadline(seconds)
    t0 = time.monotonic()
    while done < n and not deadline.expired():
        got = await client.receive("pb-plain-in", 1, visibility_timeout_s=60)
        if not got:
            continue
        m = got[0]
        await client.enqueue("pb-plain-out", [m.body])
        await client.delete("pb-plain-in", [m.id])
        done += 1
    if done < n:
        raise RuntimeError(f"plain loop: {done} of {n} in {seconds:.0f} s")
    return {"msgs_per_s": rate(n, time.monotonic() - t0)}


async def _read_all(client: AsyncClient, stream: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        page = await client.read_stream(stream, len(out), 1000)
        if not page:
            return out
        out.extend(page)


async def _crash_runs(
    client: AsyncClient,
    node: NodeProcess,
    a: argparse.Namespace,
    logs: Path,
) -> dict[str, int]:
    """The README's example under SIGKILL at random moments; then the checker."""
    runs, n, seconds = a.crash_runs, a.crash_entries, a.seconds
    rng = random.Random(a.seed)
    for name in ("ex-in", "ex-out", "ex-errors"):
        await _ensure_stream(client, name)
    await _preload(client, "ex-in", 0, n)
    target = "examples.processors.pipeline:graph"
    for i in range(runs):
        proc = _worker(node, target, logs / "crash.log")
        await asyncio.sleep(rng.uniform(0.6, 2.0))  # start-up takes ~0.5 s: kill mid-work
        proc.kill()
        await asyncio.to_thread(proc.wait, 10)
        progress(f"crash run {i + 1}/{runs}: killed")
    proc = _worker(node, target, logs / "crash.log")
    deadline = Deadline(seconds)
    try:
        while not deadline.expired():
            delivered = await client.stream_size("ex-out") + await client.stream_size("ex-errors")
            if delivered >= n:
                await asyncio.sleep(0.5)  # a duplicate would land now
                break
            await asyncio.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 30)
    counts = [0] * n
    for row in await _read_all(client, "ex-out") + await _read_all(client, "ex-errors"):
        counts[int(row["entry"]["n"])] += 1
    return {
        "crash_runs": runs,
        "crash_inputs": n,
        "lost": sum(1 for c in counts if c == 0),
        "duplicated": sum(1 for c in counts if c > 1),
    }


async def _run(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    node = start_node(tmp)
    logs = tmp / "logs"
    logs.mkdir()
    try:
        async with AsyncClient(node.url) as client:
            out: dict[str, Any] = {"scenario": "processors", "entries": a.entries}
            for strategy in STRATEGIES:
                progress(f"{strategy}: {a.entries} entries through one worker")
                r = await _strategy(client, node, strategy, a.entries, a.seconds, logs)
                out[f"{strategy}_msgs_per_s"] = r["msgs_per_s"]
                out[f"{strategy}_worker_cpu_s"] = r["worker_cpu_s"]
            progress(f"plain loop: receive → enqueue → delete, {a.entries} times")
            out["plain_loop_msgs_per_s"] = (await _plain_loop(client, a.entries, a.seconds))[
                "msgs_per_s"
            ]
            eo = out["exactly_once_msgs_per_s"]
            out["ratio_exactly_once_vs_at_most_once"] = round(
                eo / out["at_most_once_msgs_per_s"], 3
            )
            out["ratio_exactly_once_vs_at_least_once"] = round(
                eo / out["at_least_once_msgs_per_s"], 3
            )
            out["ratio_exactly_once_vs_plain_loop"] = round(eo / out["plain_loop_msgs_per_s"], 3)
            out.update(await _crash_runs(client, node, a, logs))
            out["ok"] = out["lost"] == 0 and out["duplicated"] == 0
            return out
    except BaseException:
        for log in sorted(logs.glob("*.log")):
            sys.stderr.write(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}\n")
        raise
    finally:
        node.kill()


def main(argv: list[str]) -> dict[str, Any]:
    a = _parse(argv)
    with tempfile.TemporaryDirectory(prefix="bench-processors-") as d:
        return asyncio.run(_run(a, Path(d)))
