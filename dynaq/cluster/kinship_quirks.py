"""Every workaround dynaq needs for kinship 0.4.0, in one place.

Each one says why it exists, so it can be dropped when kinship fixes it:

1. **Exit crash.** kinship's asyncio API can crash the interpreter at exit
   when the process ends right after ``close()``: its Rust thread is still
   finishing callbacks into the loop. Awaiting ~0.1 s after closing lets it
   finish (:func:`settle_after_close`). On a loaded machine that is not
   always enough: the kernel logged ``kinship-io ... segfault ... in
   libpython3.11`` twice, in ``PyThreadState_New`` reading a NULL
   interpreter, which is a GIL request after finalization cleared the
   interpreter state. So a node process ends without finalizing
   (:func:`dynaq.cli.node.exit_without_finalizing`), and a process that ran
   kinship in-process and must finalize (the test session) first stops
   routing kinship's logs into Python (:func:`stop_routing_logs`), the
   callback that wakes after the loop is gone.
2. **Events start at subscription.** ``events()`` reports only what happens
   after the call, so joins that happened during ``start()`` are never
   reported. Subscribe first, then read a ``members()`` snapshot
   (:func:`subscribe_then_snapshot`); every event after that is seen.
3. **Slow seed retries.** A node whose seeds were all unreachable at start
   retries them only every ``rejoin_interval`` (default 60 s), so a node that
   starts before its seeds stays alone for a minute. dynaq asks for a shorter
   interval (:data:`REJOIN_INTERVAL_S`).
"""

from __future__ import annotations

import asyncio

import kinship

#: How long to keep the loop alive after ``Cluster.close()`` (quirk 1).
EXIT_GRACE_S = 0.1

#: Seconds between retries of unreachable seeds (quirk 3; kinship's default is 60).
REJOIN_INTERVAL_S = 2.0


async def settle_after_close() -> None:
    """Give kinship's thread time to finish before the loop or interpreter goes away."""
    await asyncio.sleep(EXIT_GRACE_S)


def subscribe_then_snapshot(
    cluster: kinship.Cluster,
) -> tuple[kinship.EventStream, list[kinship.Member]]:
    """An event stream and the members as of its start, with nothing missed in between."""
    stream = cluster.events()
    return stream, cluster.members()


def stop_routing_logs() -> None:
    """Send kinship's log records to stderr from here on, not into Python (quirk 1):
    for a process about to finalize its interpreter with kinship's thread still alive."""
    kinship._kinship.route_to_stderr()
