"""Claiming a new queue's number: one conditional write on a counter record.

A node's claims run one at a time (:class:`~dynaq.services.record_locks.RecordLocks`),
so they never conflict with each other; a conflict means another node of the
ring claimed meanwhile, and the claim is retried with a jittered, growing backoff
(the first retry at once: the winner's write is already there to read).
"""

from __future__ import annotations

import random

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.errors import Conflict
from dynaq.services.record_locks import RecordLocks
from dynaq.storage.base import Store

NUMBER_ATTEMPTS = 48
"""How often a node tries to claim a new queue's number before a 409: only claims
by other nodes at the same moment make an attempt fail (this node's are serial)."""
_BACKOFF_BASE_S = 0.002
_BACKOFF_CAP_S = 0.1


async def claim_queue_number(
    store: Store, clock: Clock, records: RecordLocks, rng: random.Random, name: str
) -> int:
    """The next queue number, claimed for queue ``name``; :class:`Conflict` (409)
    once other nodes took :data:`NUMBER_ATTEMPTS` in a row."""
    async with records.serial(keys.QUEUE_NUMBER_SEQ):
        for attempt in range(NUMBER_ATTEMPTS):
            if attempt > 1:
                cap = min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2 ** (attempt - 2))
                await clock.sleep(rng.uniform(cap / 2, cap))
            item = await store.get(keys.QUEUE_NUMBER_SEQ)
            if item is None:
                if await store.put_if_absent(keys.QUEUE_NUMBER_SEQ, b"1") is not None:
                    return 1
                continue
            n = int(item.value) + 1
            claimed = await store.put_if_version(
                keys.QUEUE_NUMBER_SEQ, str(n).encode(), item.version
            )
            if claimed is not None:
                return n
    raise Conflict(
        f"queue {name!r} was not created: other nodes kept taking the next queue "
        f"number ({NUMBER_ATTEMPTS} attempts); retry"
    )
