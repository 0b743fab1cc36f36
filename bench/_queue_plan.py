"""What the queue bench runs, shared by its scenarios (``bench.queue`` against a peer,
``bench._queue_backends`` across stores): options, the queue's setup, how a phase is
split over client processes, and how a phase's result is shown."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from bench._queue_clients import QUEUE, ClientPool, PhaseResult, Spec
from bench.common import progress


@dataclass(frozen=True)
class Options:
    messages: int
    single_messages: int
    rtt_samples: int
    seconds: float
    concurrency: int
    procs: int
    peer: bool
    quick: bool
    node_env: dict[str, str] = field(default_factory=dict)
    storage: list[str] = field(default_factory=list)
    library: bool = False
    rounds: int = 1
    """With ``library``: each raw / library pair of phases runs this many times, with a
    share of the budget each time and the order alternating, so that both meet the
    same moments of a shared machine (see :func:`paired_ratios`)."""
    tmp_dir: str = ""
    """Where the run's files go (node data, JetStream's store, the disk probes); ""
    = the system's temporary directory. ``/dev/shm`` takes the disk out of the run."""
    workers: int = 1
    """Worker processes of the dynaq node (``http.workers``); above 1 the run also
    measures a 1-worker node, phase by phase, for the scaling figures."""
    layout: str = "shared"
    """With ``workers`` > 1: ``shared`` (one LMDB environment) or ``own`` (see
    ``bench/_own_envs.py``)."""


async def setup_queue(url: str) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as s:
        async with s.put(f"{url}/v1/queues/{QUEUE}") as r:
            if r.status not in (200, 201):
                raise RuntimeError(f"could not create queue: {r.status} {await r.text()}")
        # Several receivers at once: let the queue start with a partition each.
        patch = {"min_partitions": 4, "max_partitions": 16, "visibility_timeout": 120}
        async with s.patch(f"{url}/v1/queues/{QUEUE}", json=patch) as r:
            if r.status != 200:
                raise RuntimeError(f"could not configure queue: {r.status} {await r.text()}")


def split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def specs(
    kind: str, target: str, o: Options, pool: ClientPool, budget: int, conns: int
) -> list[Spec]:
    per_conns = split(max(conns, pool.size), pool.size)
    return [
        Spec(kind, target, c, b, budget, o.seconds)
        for c, b in zip(per_conns, split(budget, pool.size), strict=True)
    ]


def show(label: str, r: PhaseResult) -> None:
    lat = ""
    if r.latency_ms["count"]:
        lat = f"  p50 {r.latency_ms['p50']:.2f} ms  p99 {r.latency_ms['p99']:.2f} ms"
    progress(
        f"{label:<34} {r.count:>8} msgs in {r.wall_s:6.2f} s = {r.msgs_per_s:>9.0f} msgs/s"
        f"  (server {r.server_cpu_s / r.wall_s:.2f} cores, client {r.client_cpu_s / r.wall_s:.2f}"
        f" cores, errors {r.errors}){lat}"
    )


def combine(runs: list[PhaseResult]) -> PhaseResult:
    """Rounds of one phase as one: counts, times and CPU add up; latency percentiles
    cannot be merged from percentiles, so p50 is the rounds' count-weighted mean and
    every other point the rounds' largest (a bound, not a percentile)."""
    if len(runs) == 1:
        return runs[0]
    count = sum(r.count for r in runs)
    wall = sum(r.wall_s for r in runs)
    samples = sum(r.latency_ms["count"] for r in runs)
    lat = {k: max(r.latency_ms[k] for r in runs) for k in runs[0].latency_ms}
    lat["count"] = samples
    if samples:
        lat["p50"] = sum(r.latency_ms["p50"] * r.latency_ms["count"] for r in runs) / samples
    return PhaseResult(
        count=count,
        errors=sum(r.errors for r in runs),
        wall_s=wall,
        msgs_per_s=count / wall if wall > 0 else 0.0,
        client_cpu_s=sum(r.client_cpu_s for r in runs),
        server_cpu_s=sum(r.server_cpu_s for r in runs),
        latency_ms=lat,
    )


def paired_ratios(library: list[PhaseResult], raw: list[PhaseResult]) -> tuple[list[float], float]:
    """Library / raw rate per round, and their median.

    Each round's two phases ran back to back, so a neighbour's load on a shared
    machine hits both about alike; the median of the paired ratios resists the
    rounds a burst of that load distorted, where one ratio of totals does not.
    """
    ratios = [
        round(lb.msgs_per_s / dq.msgs_per_s, 3)
        for lb, dq in zip(library, raw, strict=True)
        # A consume round can find the queue drained by the rounds before it (each
        # may take up to a batch per connection more than its share): no figure.
        if lb.count and dq.count
    ]
    return ratios, round(statistics.median(ratios), 3) if ratios else 0.0


def scaling(workers: int, res: dict[str, PhaseResult]) -> dict[str, Any]:
    """The N-worker node against the 1-worker node of the same run (``w1_*`` phases)."""

    def rate_of(key: str) -> float:
        r = res.get(key)
        return r.msgs_per_s if r else 0.0

    out: dict[str, Any] = {"workers": workers}
    for what, name in (
        ("batch", "enqueue_batch"),
        ("consume", "receive_delete"),
        ("single", "enqueue_single"),
    ):
        one, many = rate_of(f"w1_{what}"), rate_of(f"dq_{what}")
        out[f"w1_{name}_msgs_per_s"] = round(one, 1)
        out[f"scaling_{name}"] = round(many / one, 3) if one > 0 else 0.0
    r = res.get("w1_rtt")
    out["w1_rtt_p50_ms"] = round(r.latency_ms["p50"], 3) if r else 0.0
    return out
