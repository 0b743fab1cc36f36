"""CPU time per message, per process, for ``bench cluster``; and CPU pinning.

On a shared 2-core box the wall rate of a ring says more about who else ran
than about the ring, but the CPU seconds each process burned for a known
number of messages do not depend much on that: a process that is preempted
does not accrue CPU time. So every timed phase samples the user + system CPU
of each process of the setup (each node's process tree, Cassandra's JVM,
HAProxy, the load generator: this very process) before and after, and the
machine's total busy time, whose rest is what other work on the box took.

:func:`pin` moves a process (every thread, optionally its children) onto a
set of CPUs, so that a run can give the nodes a core of their own.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import process_cpu_s, process_tree_cpu_s

_CLK_TCK = os.sysconf("SC_CLK_TCK")
CLIENT = "client"
MACHINE = "machine"


def busy_s() -> dict[str, float]:
    """CPU seconds not idle since boot (/proc/stat): ``machine`` (every core) and
    ``cpu0``, ``cpu1``, ... (each core: with ``--pin``, which side saturated)."""
    out: dict[str, float] = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu"):
            break
        # user nice system idle iowait irq softirq steal (guest time is inside user)
        ticks = [int(f) for f in fields[:8]]
        out[MACHINE if name == "cpu" else name] = (sum(ticks) - ticks[3] - ticks[4]) / _CLK_TCK
    return out


def listener_pid(port: int) -> int | None:
    """The pid of the local process listening on TCP ``port`` (an external Cassandra
    named by ``--cassandra``), or ``None`` if it is not ours to see."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            # local_address is HEX_IP:HEX_PORT; state 0A is LISTEN
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in wanted:
                    return int(proc.name)
        except OSError:  # another user's process, or it exited meanwhile
            continue
    return None


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def pin(pid: int, cpus: set[int], tree: bool = True) -> None:
    """Put every thread of ``pid`` (and with ``tree`` its children's) on ``cpus``.

    ``sched_setaffinity`` acts on one thread; threads started later inherit
    it, those already running (a JVM's, the Cassandra driver's) do not, so
    each one is set."""
    try:
        tids = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return
    for tid in tids:
        with contextlib.suppress(OSError):  # the thread exited meanwhile
            os.sched_setaffinity(tid, cpus)
    for child in _children(pid) if tree else []:
        pin(child, cpus, tree)


Window = tuple[dict[str, float], dict[str, float], float]
"""(µs of CPU per message of every process, the cores each used on average (and
how busy each CPU was, ``cpu0``...), wall seconds) over a window of a phase.
``others`` is the rest of the machine's busy time: other people's work on the
box, and interrupt time (loopback traffic's softirqs are not charged to a
process)."""


@dataclass
class CpuMeter:
    """CPU seconds of named processes over one phase: ``start()``, run (calling
    ``mark(done)`` once the steady part is over), ``stop(messages)``.

    ``trees`` are processes whose children count too (a node of several
    worker processes); the load generator is this process (``client``)."""

    procs: dict[str, int]
    trees: set[str] = field(default_factory=set)
    _before: dict[str, float] = field(default_factory=dict)
    _t0: float = 0.0
    _mark: tuple[dict[str, float], float, int] | None = None

    def _sample(self) -> dict[str, float]:
        out = {
            name: process_tree_cpu_s(pid) if name in self.trees else process_cpu_s(pid)
            for name, pid in self.procs.items()
        }
        out[CLIENT] = time.process_time()
        out.update(busy_s())
        return out

    def start(self) -> None:
        self._before = self._sample()
        self._t0 = time.monotonic()
        self._mark = None

    def mark(self, messages: int) -> None:
        """End the steady window here, ``messages`` done (the first call of a phase
        counts): reading /proc takes well under a millisecond, fine inside a loop."""
        if self._mark is None:
            self._mark = (self._sample(), time.monotonic(), messages)

    def _window(self, after: dict[str, float], t1: float, messages: int) -> Window:
        wall = t1 - self._t0
        used = {k: max(0.0, after[k] - self._before[k]) for k in after}
        per_cpu = {k: used.pop(k) for k in list(used) if k.startswith("cpu")}
        ours = sum(v for k, v in used.items() if k != MACHINE)
        used["others"] = max(0.0, used.pop(MACHINE) - ours)
        us = {k: round(v / messages * 1e6, 2) if messages else 0.0 for k, v in used.items()}
        cores = {k: round(v / wall, 3) if wall > 0 else 0.0 for k, v in (used | per_cpu).items()}
        return us, cores, wall

    def stop(self, messages: int) -> Window:
        """The whole phase, ``messages`` done."""
        return self._window(self._sample(), time.monotonic(), messages)

    def steady(self) -> Window | None:
        """From the start to :meth:`mark`, if it was called."""
        return None if self._mark is None else self._window(*self._mark)
