"""Writer slots: each live node of a cluster draws ids with its own 5-bit slot.

Ids carry the writer slot (see :mod:`dynaq.core.ids`), so two nodes holding
the same slot could draw the same id and one enqueue would overwrite another.
Slots are therefore leased through the shared store:

* ``w/slot/<n>`` (n = 0..31) holds a :class:`~dynaq.core.leases.CasLease`
  record, ``{"name", "heartbeat_ms"}``. Every write is a conditional put
  (``put_if_absent`` / ``put_if_version``), so two nodes can never both win a
  slot.
* A node takes, in order: the slot already recorded under its own name (a
  restart keeps its slot), a free slot, or the slot of a node that is neither
  live in the ring nor heard from for ``lease_s`` (its lease lapsed).
* The holder refreshes its heartbeat every ``refresh_s``. If a refresh finds
  the slot taken by another node (this node was cut off longer than the
  lease), the slot is lost: :class:`WriterSlots` calls ``on_lost`` and the node
  must stop taking enqueues (it shuts down: fail-stop beats duplicate ids).

**Limit: 32 concurrent writers per store.** A 33rd node cannot start
(:class:`~dynaq.errors.ClusterFull`) until a departed node's lease lapses.
Nodes keep their slot across restarts and graceful stops, so a fixed set of
names never runs out. A single node with gossip off uses slot 0 without
asking the store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.ids import MAX_WRITERS
from dynaq.core.leases import CasLease, LeaseState
from dynaq.errors import ClusterFull, SlotLost, StorageError
from dynaq.storage.base import Store
from dynaq.tasks import cancel_and_wait

log = logging.getLogger(__name__)

SLOT_PREFIX = keys.WRITER_SLOT


def slot_key(slot: int) -> bytes:
    return SLOT_PREFIX + b"%02d" % slot


class WriterSlots:
    """Leases one writer slot for ``name`` and keeps the lease fresh."""

    def __init__(
        self,
        store: Store,
        name: str,
        clock: Clock,
        *,
        lease_s: float = 60.0,
        refresh_s: float = 10.0,
        live: Callable[[], set[str]] = set,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        if refresh_s * 2 > lease_s:
            raise ValueError("refresh_s must be at most half of lease_s")
        self._store = store
        self._name = name
        self._clock = clock
        self._lease_s = lease_s
        self._refresh_s = refresh_s
        self._live = live
        self._on_lost = on_lost
        self._lease: CasLease | None = None
        self._task: asyncio.Task[None] | None = None
        self.slot: int | None = None

    async def acquire(self) -> int:
        """Take a slot (see the module docstring for the order) and start refreshing it."""
        leases = [
            CasLease(self._store, slot_key(n), self._name, self._clock, self._lease_s)
            for n in range(MAX_WRITERS)
        ]
        # One read of every slot, then conditional puts on the versions it saw.
        items = await self._store.get_many([lease.key for lease in leases])
        live = self._live()
        now = self._clock.wall_ms()
        states = [
            lease.state(item, live=live, now_ms=now)
            for lease, item in zip(leases, items, strict=True)
        ]
        order = [
            n
            for wanted in (LeaseState.MINE, LeaseState.FREE, LeaseState.LAPSED)
            for n, state in enumerate(states)
            if state is wanted
        ]
        for n in order:
            if await leases[n].take(items[n], live=live):
                self.slot, self._lease = n, leases[n]
                log.info("writer slot taken", extra={"slot": n, "node": self._name})
                self._task = asyncio.create_task(self._refresh_loop(), name="writer-slot")
                return n
        raise ClusterFull(
            f"all {MAX_WRITERS} writer slots are held; a departed node's slot frees "
            f"{int(self._lease_s * 1000) // 1000} s after it was last seen"
        )

    async def refresh(self) -> None:
        """Renew the lease once; raises :class:`~dynaq.errors.SlotLost` if another
        node holds the slot."""
        assert self._lease is not None
        if not await self._lease.refresh():
            raise SlotLost(f"writer slot {self.slot} was taken over by another node")

    async def _refresh_loop(self) -> None:
        while True:
            await self._clock.sleep(self._refresh_s)
            try:
                await self.refresh()
            except SlotLost:
                log.critical("writer slot lost; this node must stop", extra={"slot": self.slot})
                if self._on_lost is not None:
                    self._on_lost()
                return
            except StorageError:
                # The store is down: enqueues fail too, so no id is drawn meanwhile.
                log.warning("writer slot refresh failed; retrying", exc_info=True)

    async def stop(self) -> None:
        """Stop refreshing. The record stays, so a restart under this name keeps the slot."""
        await cancel_and_wait(self._task)
        self._task = None
