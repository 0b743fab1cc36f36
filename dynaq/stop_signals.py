"""SIGTERM and SIGINT for a dynaq process (a node, its supervisor, a ``dynaq
worker``): the first asks it to stop gracefully.

Guarantee: from :func:`stop_on_signals` until the process exits, neither signal
kills the process by its default action. Before it has stopped, each one asks it
to stop (again, if repeated: a no-op); once it has stopped, they are ignored,
because the asyncio loop, on closing, puts the default action back, and a second
SIGTERM from a supervisor (or a second Ctrl-C) landing during the process's own
exit would turn a clean exit (status 0) into death by signal (-15).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def stop_on_signals(loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> None:
    """Call ``stop`` on the loop for each SIGTERM or SIGINT."""
    for sig in _STOP_SIGNALS:
        loop.add_signal_handler(sig, stop)


def ignore_signals_once_stopped(loop: asyncio.AbstractEventLoop) -> None:
    """The process has stopped its work: ignore SIGTERM and SIGINT for the rest of the process's
    exit (the loop no longer has handlers to put the default action back)."""
    # Blocked meanwhile: removing the loop's handler puts the default action back for
    # an instant, and a signal landing then would still kill the process. One that
    # arrives while blocked is delivered, and dropped, once it is ignored.
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        for sig in _STOP_SIGNALS:
            loop.remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_IGN)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
