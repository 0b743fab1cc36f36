"""What the queue bench runs, shared by its scenarios (``bench.queue`` against a peer,
``bench._queue_backends`` across stores): options, the queue's setup, how a phase is
split over client processes, and how a phase's result is shown."""

from __future__ import annotations

from dataclasses import dataclass, field

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
