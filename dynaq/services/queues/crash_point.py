"""A test hook that SIGKILLs the node at a named step of a multi-step write.

The fault tests use it (through ``DYNAQ_TESTING_CRASH_AT``) to die exactly in
the window a guarantee is about, which a kill -9 from outside hits only by
chance: a transaction after its receipts were held, after its outputs were
prepared, after its write; a redrive after a page's batch. Unset, it costs one
comparison per step.
"""

from __future__ import annotations

import os
import signal

from dynaq.errors import InvalidInput

CRASH_STEPS = ("held", "prepared", "written", "redrive_page")
"""Where :class:`CrashPoint` can stop the node: a transaction after its receipts
were held, after its outputs were prepared (dedup checked, ids drawn), after its
write; a redrive task after a page's store batch."""


class CrashPoint:
    """SIGKILL this process (a worker: its whole node) at a named step (a test hook).

    ``spec`` is ``"<step>"`` (the first time the step is reached) or
    ``"<step>:<n>"`` (the n-th time); ``None`` disables it.
    """

    def __init__(self, spec: str | None, node_pid: int | None = None) -> None:
        self.step: str | None = None
        self._left = 0
        # A worker of a node of several: the node's supervisor, killed first, so the
        # whole node dies at the step (its other workers die with it), as one process
        # would; a lone worker's death the supervisor would just restart.
        self._node_pid = node_pid
        if spec:
            step, sep, n = spec.partition(":")
            if step not in CRASH_STEPS or (sep and not (n.isdecimal() and int(n) >= 1)):
                raise InvalidInput(
                    f"crash point {spec!r}: want <step>[:<n>], step in {CRASH_STEPS}"
                )
            self.step, self._left = step, int(n or 1)

    def reached(self, step: str) -> None:
        if self.step != step:
            return
        self._left -= 1
        if self._left <= 0:
            if self._node_pid is not None:
                os.kill(self._node_pid, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
