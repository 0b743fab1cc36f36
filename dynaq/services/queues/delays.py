"""Delayed messages: they wait under their due time and become messages once due.

A delayed message is written at its enqueue with the id it will keep, under
``y/`` + due wall ms + queue + id (:func:`dynaq.core.keys.delayed`), not under
the queue's message keys, so no receive can see it early and no scan of the
backlog ever meets it. Every node runs a mover that reads the due range from
the start of ``y/`` (one scan, sized by what is due, whatever the backlog and
however many messages wait for later) and moves the due messages of its own
slice: in one store batch it writes the message under its id and deletes the
waiting record.

Guarantees:

* **Never early**: a delayed message is not receivable before its due time by
  the moving node's wall clock (the nodes' clocks are assumed to agree, NTP;
  a node whose clock runs ahead moves its slice's messages that much early).
  It becomes receivable within about ``poll_s`` after it is due.
* **Survives restarts and failover**: the waiting record is in the store; if
  the owner of its slice dies (``kill -9``), the next owner moves it.
* A move is one store batch (written and removed together). Two nodes that
  both believe they own a lane during a ring change write the same key with
  the same value: no duplicate.
* The message keeps the id drawn at its enqueue, so its id time is its
  enqueue time (retention counts from the enqueue, as in SQS), and its group
  order is enqueue order. Peeking or deleting it by id before it is due finds
  nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.ids import lane_of
from dynaq.core.membership import MembershipView
from dynaq.core.messages import decode_fields
from dynaq.errors import DynaqError
from dynaq.metrics import Metrics
from dynaq.services.catalog import Catalog, QueueInfo
from dynaq.services.queues.state import QueueStates
from dynaq.storage.base import Delete, Op, Put, Store
from dynaq.tasks import cancel_and_wait, every

log = logging.getLogger(__name__)

_PAGE = 1000


class DelayMover:
    """Moves this node's due delayed messages into their queues, every ``poll_s``."""

    def __init__(
        self,
        store: Store,
        catalog: Catalog,
        clock: Clock,
        view: MembershipView,
        states: QueueStates,
        metrics: Metrics,
        serving: Callable[[], bool],
        poll_s: float = 0.2,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._clock = clock
        self._view = view
        self._states = states
        self._metrics = metrics
        self._serving = serving
        self.poll_s = poll_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(
            every(self.poll_s, self.move_due, clock=self._clock, what="delayed messages"),
            name="delay-mover",
        )

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def move_due(self) -> int:
        """Move every due delayed message of this node's slice; return how many."""
        if not self._serving():
            return 0  # joining: this node's idea of its slice is not settled yet
        start, end = keys.delayed_until(self._clock.wall_ms() + 1)
        live: dict[int, QueueInfo] = {}
        for name in self._catalog.queue_names():
            info = self._catalog.cached_queue(name)
            if info is not None:
                live[info.number] = info
        dead = {t.number for t in self._catalog.tombstones.values()}
        moved = 0
        while True:
            rows = await self._store.scan(start, end, _PAGE)
            moved += await self._move(rows, live, dead)
            if len(rows) < _PAGE:
                return moved
            start = rows[-1][0] + b"\x00"

    async def _move(
        self, rows: list[tuple[bytes, bytes]], live: dict[int, QueueInfo], dead: set[int]
    ) -> int:
        mine = self._view.my_slice
        ops: list[Op] = []
        landed: list[tuple[int, int, str | None]] = []
        for key, value in rows:
            _, number, mid = keys.delayed_fields(key)
            if lane_of(mid) not in mine:
                continue  # its slice's owner moves it
            if number in dead:
                ops.append(Delete(key))  # its queue was deleted meanwhile
                continue
            if number not in live:
                continue  # created moments ago on another node: next round
            try:
                group = decode_fields(mid, value)[3]
            except DynaqError:
                group = None  # moved as stored: a receive reports the corruption
            ops.append(Put(keys.message(number, mid), value))
            ops.append(Delete(key))
            landed.append((number, mid, group))
        if not ops:
            return 0
        await self._store.write_batch(ops)
        for number, mid, group in landed:
            self._states.add_depth(number, 1)
            st = self._states.get(number)
            if st is not None:
                st.note_enqueued(lane_of(mid))
                if group is not None:
                    st.note_group_written(mid)
        return len(landed)
