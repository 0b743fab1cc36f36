"""Kill a node's whole process tree at once, as a machine crash would.

A node of several workers is a supervisor, its workers and (on the embedded
store) each worker's writer process. The workers die with the supervisor
(``PR_SET_PDEATHSIG``), but the kernel delivers that signal after the
supervisor is reaped: for a moment a worker still holds its clients'
keep-alive connections, and a request sent in that moment is reset after it
left, which no client may resend. A crash test wants every process gone, and
every socket closed, before it goes on: :func:`kill_tree` gives that.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children first), read from ``/proc``.

    Empty where ``/proc`` has no ``children`` lists (not Linux)."""
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for task in _tasks(parent):
            try:
                text = (task / "children").read_text()
            except OSError:
                continue
            for word in text.split():
                child = int(word)
                if child not in found:
                    found.append(child)
                    frontier.append(child)
    return found


def _tasks(pid: int) -> list[Path]:
    try:
        return list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []


def gone(pid: int) -> bool:
    """Whether ``pid`` has exited, every thread of it: its sockets and files are
    closed then, though its exit status may wait to be read (a zombie).

    The thread that leads a process shows as a zombie as soon as it exits, while
    the other threads may still be exiting and holding the process's files: so
    each thread's state is read, not only the leader's."""
    tasks = _tasks(pid)
    return all(_exited(task / "stat") for task in tasks)


def _exited(stat_path: Path) -> bool:
    try:
        stat = stat_path.read_text()
    except OSError:
        return True
    # The state follows the command name, which is in parentheses and may hold spaces.
    return stat[stat.rindex(")") + 2 :].startswith(("Z", "X"))


def kill_tree(pid: int, timeout_s: float = 10.0) -> None:
    """SIGKILL ``pid`` and every descendant it has now, then wait until all are gone.

    The caller still reaps ``pid`` itself (``Popen.wait``). Raises ``TimeoutError``
    naming the survivors if any outlives ``timeout_s``."""
    family = [pid, *descendants(pid)]
    for each in family:
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    left = [each for each in family[1:] if not gone(each)]
    while left:
        if time.monotonic() > deadline:
            raise TimeoutError(f"processes {left} outlived SIGKILL by {timeout_s} s")
        time.sleep(0.01)
        left = [each for each in left if not gone(each)]
