"""Shared helpers for every benchmark scenario: timing, percentiles, CPU, a node.

Kept small and stable because every ``bench/<scenario>.py`` imports it:

* :func:`percentiles` -- p50/p90/p99/max of latency samples.
* :class:`Timer` -- monotonic wall time plus this process's CPU time.
* :class:`Deadline` -- the time bound every load loop must respect.
* :func:`process_cpu_s` -- CPU seconds used so far by another process (Linux);
  :func:`process_tree_cpu_s` with its children (a node's workers).
* :func:`start_node` -- a real ``dynaq server`` process on a free port.
* :func:`fsync_latency_ms` -- how slow the disk is right now (shared machines).
* :func:`progress` -- a progress line on stderr (stdout ends with the JSON line).
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from dynaq.testing.process import NodeProcess, free_port, node_process

__all__ = [
    "Deadline",
    "NodeProcess",
    "Timer",
    "free_port",
    "fsync_latency_ms",
    "percentiles",
    "process_cpu_s",
    "process_tree_cpu_s",
    "progress",
    "rate",
    "start_node",
]

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def progress(message: str) -> None:
    """Print one progress line to stderr, so stdout can end with the JSON line."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentiles(
    samples: Sequence[float], points: Sequence[float] = (50, 90, 99)
) -> dict[str, float]:
    """Nearest-rank percentiles of ``samples`` as ``{"p50": ..., "p99": ..., "max": ...}``.

    Nearest-rank (no interpolation) so a p99 is always a latency that was
    actually observed. Also returns ``count`` and ``mean``; all zeros when
    there are no samples.
    """
    out: dict[str, float] = {}
    if not samples:
        for p in points:
            out[f"p{p:g}"] = 0.0
        out.update(max=0.0, mean=0.0, count=0)
        return out
    ordered = sorted(samples)
    n = len(ordered)
    for p in points:
        rank = max(1, math.ceil(p / 100.0 * n))
        out[f"p{p:g}"] = ordered[min(rank, n) - 1]
    out.update(max=ordered[-1], mean=sum(ordered) / n, count=n)
    return out


def rate(count: float, seconds: float) -> float:
    """``count / seconds``, 0 when no time passed (never divides by zero)."""
    return count / seconds if seconds > 0 else 0.0


class Timer:
    """Wall time (monotonic) and this process's CPU time over a ``with`` block.

    ``elapsed_s`` and ``cpu_s`` read live inside the block and freeze on exit.
    """

    def __init__(self) -> None:
        self._t0 = 0.0
        self._c0 = 0.0
        self._t1: float | None = None
        self._c1: float | None = None

    def __enter__(self) -> Timer:
        self._t0, self._c0 = time.monotonic(), time.process_time()
        self._t1 = self._c1 = None
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._t1, self._c1 = time.monotonic(), time.process_time()

    @property
    def elapsed_s(self) -> float:
        return (self._t1 if self._t1 is not None else time.monotonic()) - self._t0

    @property
    def cpu_s(self) -> float:
        return (self._c1 if self._c1 is not None else time.process_time()) - self._c0


class Deadline:
    """A time bound for a load loop: ``while not deadline.expired(): ...``."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def expired(self) -> bool:
        return time.monotonic() >= self.at

    def left_s(self) -> float:
        return max(0.0, self.at - time.monotonic())


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds used so far by process ``pid`` (Linux /proc), 0 if unknown.

    Counts all threads of the process (LMDB writer threads included), not
    its children.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    # The command name (field 2) may hold spaces; fields resume after ")".
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def process_tree_cpu_s(pid: int) -> float:
    """:func:`process_cpu_s` of ``pid`` plus that of its running children (a node of
    several workers: the supervisor and its worker processes). A child that exited
    during a phase takes its CPU with it; workers do not exit during a run."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return process_cpu_s(pid) + sum(process_cpu_s(int(c)) for c in children)


def fsync_latency_ms(directory: Path, samples: int = 200, seconds: float = 3.0) -> dict[str, float]:
    """Percentiles of write(4 KiB) + fdatasync latency in ``directory``, in ms.

    Durable queues are bound by this on a busy disk; reporting it next to
    throughput says whether a slow run was the code or the neighbours.
    Bounded by ``samples`` and ``seconds``. Blocking: call it outside any event loop.
    """
    path = directory / ".fsync-probe"
    block = os.urandom(4096)
    out: list[float] = []
    deadline = Deadline(seconds)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while len(out) < samples and not deadline.expired():
            t0 = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            out.append((time.perf_counter() - t0) * 1000)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return percentiles(out)


def start_node(tmp: Path, name: str = "bench-1", **env: str) -> NodeProcess:
    """Start a real ``dynaq server`` with a fresh data dir under ``tmp``; return it healthy.

    Stats are off, logging is at ``warning`` and the node is one process
    (``DYNAQ_HTTP_WORKERS=1``, where a node's default is one worker per core:
    each scenario says how many it measures) unless ``env`` overrides them
    (keys are full variable names, e.g. ``DYNAQ_LOG_LEVEL="info"``). With
    ``DYNAQ_HTTP_WORKERS`` > 1 in ``env`` (a node of that many worker processes)
    it returns once every worker serves and sees the others.
    The caller must ``terminate()`` (or ``kill()``) the returned process.
    """
    full = {"DYNAQ_STATS_TYPE": "none", "DYNAQ_LOG_LEVEL": "warning", "DYNAQ_HTTP_WORKERS": "1"}
    full.update(env)
    workers = int(full["DYNAQ_HTTP_WORKERS"])
    node = node_process(tmp, name, env=full).start()
    if workers > 1:
        try:
            _wait_workers(node, workers, Deadline(60.0))
        except RuntimeError:
            node.kill()
            raise
    return node


def _wait_workers(node: NodeProcess, workers: int, deadline: Deadline) -> None:
    """Block until the node lists ``workers`` live workers, each healthy and seeing
    all of them."""
    import json

    from dynaq.testing.cluster import http_get

    while not deadline.expired():
        try:
            status, body = http_get(f"{node.url}/v2/status/workers")
            live = [w["http"] for w in json.loads(body)["live"]] if status == 200 else []
            ok = len(live) == workers
            for addr in live if ok else []:
                code, health = http_get(f"http://{addr}/health")
                ok = ok and code == 200 and json.loads(health)["workers_live"] == workers
            if ok:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the node's {workers} workers did not converge:\n{node.log()}")
