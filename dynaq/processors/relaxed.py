"""At-least-once and at-most-once steps: cheaper than exactly once (one position
record per step instead of a snapshot, an attempt and a conditional append).

- ``at_least_once``: take the step's entries, run the function, write its
  outputs, *then* commit the input positions (a ``position`` record; for a queue
  input, delete the message). A crash in between repeats the step: outputs may be
  written twice (a queue output carries the delivery hash as its dedup id, so a
  repeat inside the queue's dedup window is stored once; a sink gets the same
  delivery hash on the repeat).
- ``at_most_once``: commit the positions (and delete queue messages) *first*, then
  run and write. A crash in between loses the step, never repeats it.

Positions live in the backing stream, appended under the publisher lease like
everything else there.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from dynaq.client import AsyncClient, ReceivedMessage
from dynaq.processors import faults, records
from dynaq.processors.graph import Processor, QueueRef, Strategy, StreamRef
from dynaq.processors.io import Backing, QueueInput, Stopping, enqueue
from dynaq.processors.steps import Reader, Selection, Stats, initial_tailers, plan, run_user


class Relaxed:
    """One processor's at-least-once or at-most-once steps."""

    def __init__(
        self,
        proc: Processor,
        client: AsyncClient,
        backing: Backing,
        reader: Reader,
        stats: Stats,
        stop: asyncio.Event,
    ) -> None:
        self.proc, self.client, self.backing = proc, client, backing
        self.reader, self.stats, self.stop = reader, stats, stop
        self.tailers = initial_tailers(proc)
        self.queues = {
            e.name: QueueInput(client, e.name) for e in proc.inputs if isinstance(e, QueueRef)
        }

    async def recover(self) -> None:
        """Resume at the last committed positions."""
        faults.point("recovery.start")
        recs = await self.backing.since_last_snapshot()
        faults.point("recovery.read")
        if recs:
            self.tailers = {**initial_tailers(self.proc), **recs[0]["tailers"]}

    async def _take(self) -> tuple[Selection, dict[str, int], list[tuple[str, ReceivedMessage]]]:
        taken: dict[str, tuple[int, Any]] = {}
        received: list[tuple[str, ReceivedMessage]] = []
        nxt = dict(self.tailers)
        for e in self.proc.inputs:
            if isinstance(e, StreamRef):
                got = await self.reader.wait(e.name, self.tailers[e.name], self.stop)
                taken[e.name] = got
                nxt[e.name] = got[0] + 1
                continue
            while (m := await self.queues[e.name].receive()) is None:
                if self.stop.is_set():
                    raise Stopping("stopping")
            received.append((e.name, m[0]))
            taken[e.name] = (m[0].id, m[1])
        return Selection(taken, nxt), nxt, received

    async def step(self) -> None:
        p = self.proc
        sel, nxt, received = await self._take()
        positions = {name: index for name, (index, _) in sel.taken.items()}
        h = records.delivery_hash(p.id, positions)
        at_most = p.strategy is Strategy.AT_MOST_ONCE
        if at_most:
            await self._commit(nxt, received)
        pairs, error = await run_user(p, sel, h)
        for slot, w in enumerate(plan(p, h, pairs, error)):
            if any(isinstance(o, QueueRef) and o.name == w["stream"] for o in p.endpoints()):
                await enqueue(self.client, w["stream"], w["entry"], f"{h}-{slot}")
            else:
                await self.client.append(w["stream"], [w["entry"]])
        faults.point("effect.done")  # the function ran, its outputs are written
        if not at_most:
            await self._commit(nxt, received)
        self.tailers = nxt
        self.stats.handled_errors += error
        self.stats.delivered += 1
        self.stats.last_delivery_s = time.time()

    async def _commit(
        self, nxt: dict[str, int], received: list[tuple[str, ReceivedMessage]]
    ) -> None:
        if nxt:
            await self.backing.append(records.position(nxt))
            faults.point("position.written")
        for name, m in received:
            await self.queues[name].delete(m)
