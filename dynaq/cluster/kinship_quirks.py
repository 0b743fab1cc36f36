"""Every workaround dynaq needs for kinship 0.4.0, in one place.

Each one says why it exists, so it can be dropped when kinship fixes it:

1. **Exit crash.** kinship's asyncio API can crash the interpreter at exit
   when the process ends right after ``close()``: its Rust thread is still
   finishing callbacks into the loop. Awaiting ~0.1 s after closing lets it
   finish (:func:`settle_after_close`).
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
