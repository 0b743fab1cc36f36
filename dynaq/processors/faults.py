"""Fault points: named places in the persistence and recovery components where a
crash test can kill the worker with SIGKILL (no cleanup, no flush, like ``kill -9``).

Armed only by :func:`arm` (the ``dynaq worker`` command calls it with
``DYNAQ_FAULT_POINT``, ``<name>:<nth>``, e.g. ``attempt.written:3``): the process
kills itself the ``nth`` time it reaches ``name``. Unarmed, :func:`point` is
one ``is None`` test. The names are :data:`POINTS`; a name not in it is refused
at arming, so a typo in a test cannot pass for a crash that never happened.
"""

from __future__ import annotations

import os
import signal

POINTS = (
    # persistence component (exactly once), in step order
    "snapshot.before",
    "snapshot.written",
    "alts.written",
    "fn.done",
    "attempt.written",
    "output.written",
    "nil.written",
    # recovery component
    "recovery.start",
    "recovery.read",
    "recovery.attempt.written",
    "recovery.output.written",
    # at-least-once / at-most-once
    "position.written",
    "effect.done",
    # exactly once over queues (one transaction per step)
    "txn.committed",
)

_armed: tuple[str, int] | None = None
_seen = 0


def arm(spec: str | None) -> None:
    """Arm the fault point ``spec`` (``name:nth``, ``nth`` ≥ 1); ``None`` or ``""``
    disarms. ``ValueError`` for an unknown name or a bad count."""
    global _armed, _seen
    _seen = 0
    if not spec:
        _armed = None
        return
    name, _, nth = spec.rpartition(":")
    if name not in POINTS or not nth.isdigit() or int(nth) < 1:
        raise ValueError(f"fault point {spec!r}: expected <name>:<nth> with name in {POINTS}")
    _armed = (name, int(nth))


def point(name: str) -> None:
    """Reach fault point ``name``: SIGKILL this process if it is the armed one's nth time."""
    global _seen
    if _armed is None or _armed[0] != name:
        return
    _seen += 1
    if _seen >= _armed[1]:
        os.kill(os.getpid(), signal.SIGKILL)
