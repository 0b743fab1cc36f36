"""Durable LMDB commits from several processes: one shared environment, or one each.

``python -m bench lmdb_procs [--seconds S] [--batch B] [--procs P] [--rounds R] [--tmp-dir DIR]``

The storage question under a node of several workers (``http.workers``): the
workers share one LMDB environment, whose write lock lets one commit (and its
fsyncs) run at a time; the alternative gives each worker an environment of its
own. Three runs, S seconds each, every commit B appending 256-byte puts with
fsync (as the embedded store commits): one process alone; P processes on one
environment; P processes on an environment each. The three run R times in
turn (each round on fresh environments), so all meet the same moments of a
shared machine; reports each run's median puts/s and commit latency, and the
two ratios of the medians to the single process.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import progress

_ROOT = Path(__file__).resolve().parent.parent


def _run(paths: list[Path], seconds: float, batch: int) -> dict[str, float]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench._lmdb_writer", str(p), str(seconds), str(batch), str(i)],
            stdout=subprocess.PIPE,
            cwd=_ROOT,
        )
        for i, p in enumerate(paths)
    ]
    outs = []
    for proc in procs:
        out, _ = proc.communicate(timeout=seconds * 4 + 60)
        if proc.returncode != 0:
            raise RuntimeError("an LMDB writer process failed")
        outs.append(json.loads(out))
    wall = max(o["wall_s"] for o in outs)
    return {
        "puts_per_s": round(sum(o["puts"] for o in outs) / wall, 1),
        "commits_per_s": round(sum(o["commits"] for o in outs) / wall, 1),
        "commit_p50_ms": round(max(o["p50_ms"] for o in outs), 3),
        "commit_p99_ms": round(max(o["p99_ms"] for o in outs), 3),
    }


def main(argv: list[str]) -> dict[str, Any]:
    p = argparse.ArgumentParser(
        prog="python -m bench lmdb_procs", description=__doc__.split("\n")[0]
    )
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--batch", type=int, default=100, help="puts per commit")
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tmp-dir", default="", help="where the environments go")
    a = p.parse_args(argv)
    runs: dict[str, list[dict[str, float]]] = {"one": [], "shared": [], "own": []}
    for n in range(max(1, a.rounds)):
        tmp = Path(tempfile.mkdtemp(prefix="dynaq-lmdb-procs-", dir=a.tmp_dir or None))
        try:
            runs["one"].append(_run([tmp / "one"], a.seconds, a.batch))
            runs["shared"].append(_run([tmp / "shared"] * a.procs, a.seconds, a.batch))
            runs["own"].append(_run([tmp / f"own{i}" for i in range(a.procs)], a.seconds, a.batch))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        progress(
            f"round {n + 1}: puts/s 1 process {runs['one'][-1]['puts_per_s']:.0f}, "
            f"{a.procs} on one environment {runs['shared'][-1]['puts_per_s']:.0f}, "
            f"{a.procs} on one each {runs['own'][-1]['puts_per_s']:.0f}"
        )
    one, shared, own = (
        {k: statistics.median(x[k] for x in runs[name]) for k in runs[name][0]}
        for name in ("one", "shared", "own")
    )
    out: dict[str, Any] = {
        "scenario": "lmdb_procs",
        "procs": a.procs,
        "batch": a.batch,
        "rounds": max(1, a.rounds),
    }
    for name, figures in (("one", one), ("shared", shared), ("own", own)):
        for k, v in figures.items():
            out[f"{name}_{k}"] = v
    out["ratio_shared_vs_one"] = round(shared["puts_per_s"] / one["puts_per_s"], 3)
    out["ratio_own_vs_one"] = round(own["puts_per_s"] / one["puts_per_s"], 3)
    return out
