"""Exactly-once steps for a processor whose inputs and outputs are all queues, over the
node's atomic consume-produce call (``POST /v2/transactions``).

**A step.** Receive one message from each input (an alts processor: from whichever
input has one first), run the function, then in **one transaction** delete the
inputs by their receipts and enqueue the outputs (or the handled error's entry),
each output carrying the dedup id ``<delivery hash>-<slot>``. The delivery hash is
computed from the processor id and the inputs' *message ids*, which do not change
when a message is delivered again, so every attempt at the same inputs has the
same hash and the same dedup ids.

**Guarantee.** Every input message is consumed exactly once: its outputs (or its
error entry) are enqueued exactly once and the message is deleted, or neither
happened and it is delivered again.

**Why.** The transaction is all or nothing (see the README's "Transactions"), so
a crash before it commits leaves the inputs in flight and no output: their
visibility runs out and the step runs again. A crash after it commits leaves the
inputs deleted: nothing runs again. A commit whose answer was lost is sent again
with the same receipts: the node answers it as *replayed* (it committed) or
refuses it as stale (it did not, and the inputs were delivered again since); in
that case whoever takes them runs the step with the same hash, and the dedup ids
store each output once even if the lost commit had in fact been applied. A
receipt another transaction is committing (``receipts_in_use``) is retried. A
stale receipt (the visibility ran out mid-step, so someone else may hold the
message) drops the step: nothing of it was applied.

The backing stream is used only for its publisher lease (one worker runs the
processor at a time); there is nothing to recover at start: the state is in the
queues. Side effects in sinks are at least once with the hash, as with streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

from dynaq.client import AsyncClient, DynaqError, ReceivedMessage, TxnDelete, TxnEnqueue
from dynaq.processors import faults, records
from dynaq.processors.graph import Kind, Processor
from dynaq.processors.io import Backing, Stopping
from dynaq.processors.steps import Reader, Selection, Stats, plan, run_user

log = logging.getLogger(__name__)

DEFAULT_VISIBILITY_S = 30.0
"""How long a step holds its inputs when their queue does not say (each input queue's
own visibility timeout otherwise; extended while a join waits for its other inputs)."""
_POLL_S = 1.0
STALE_RECEIPT = "stale_receipt"
RECEIPTS_IN_USE = "receipts_in_use"
_COMMIT_TRIES = 20


class QueueOnce:
    """One queue-to-queue processor's exactly-once steps (see the module)."""

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
        self.stats, self.stop = stats, stop
        self.tailers: dict[str, int] = {}  # queues have no positions
        self.visibility: dict[str, float] = {}
        self.dropped = 0
        """Steps whose inputs went stale before their commit (delivered again, elsewhere)."""

    async def recover(self) -> None:
        """Nothing to recover (an uncommitted step's inputs are delivered again); learn
        each input queue's visibility timeout, which a step holds its inputs for."""
        faults.point("recovery.start")
        for e in self.proc.inputs:
            info = await self.client.describe_queue(e.name)
            vt = info.settings.visibility_timeout_s
            self.visibility[e.name] = DEFAULT_VISIBILITY_S if vt is None else vt

    async def step(self) -> None:
        p = self.proc
        taken = await self._take()
        ids = {name: m.id for name, (m, _) in taken.items()}
        h = records.delivery_hash(p.id, ids)
        alts = next(iter(taken)) if p.kind is Kind.ALTS else None
        sel = Selection({name: (m.id, entry) for name, (m, entry) in taken.items()}, {}, alts)
        pairs, error = await run_user(p, sel, h)
        faults.point("fn.done")
        deletes = [TxnDelete.of(name, m) for name, (m, _) in taken.items()]
        enqueues = [
            TxnEnqueue(w["stream"], records.canonical(w["entry"]), dedup_id=f"{h}-{slot}")
            for slot, w in enumerate(plan(p, h, pairs, error))
        ]
        self.stats.attempts += 1
        if not await self._commit(deletes, enqueues):
            return
        faults.point("txn.committed")
        self.stats.handled_errors += error
        self.stats.delivered += 1
        self.stats.last_delivery_s = time.time()

    async def _commit(self, deletes: list[TxnDelete], enqueues: list[TxnEnqueue]) -> bool:
        """Commit the step; False when its receipts went stale (nothing applied)."""
        for attempt in range(_COMMIT_TRIES):
            try:
                await self.client.transact(deletes, enqueues)
                return True
            except DynaqError as exc:
                if exc.code == STALE_RECEIPT:
                    self.dropped += 1
                    log.warning(
                        "processor step dropped: its inputs were delivered again",
                        extra={"processor": self.proc.id, "error": str(exc)},
                    )
                    return False
                # receipts_in_use: an earlier send of this commit is still running, and
                # its outcome decides; other retriable errors: the outcome is unknown.
                if exc.code != RECEIPTS_IN_USE and not exc.retriable:
                    raise
            except (TimeoutError, OSError):
                pass  # the outcome is unknown: the same receipts again say which
            await asyncio.sleep(min(0.05 * 2**attempt, 1.0))
        raise TimeoutError(f"{self.proc.id}: a step's transaction did not settle")

    async def _take(self) -> dict[str, tuple[ReceivedMessage, Any]]:
        """One message from each input (alts: the first input that has one), held
        invisible while the step waits for the rest."""
        names = [e.name for e in self.proc.inputs]
        if self.proc.kind is Kind.ALTS:
            while True:
                for name in names:
                    got = await self._receive(name, 0.0)
                    if got is not None:
                        return {name: got}
                await self._idle(_POLL_S / 4)
        taken: dict[str, tuple[ReceivedMessage, Any]] = {}
        try:
            for name in names:
                while (got := await self._receive(name, _POLL_S)) is None:
                    await self._extend(taken)
                    await self._idle(0)
                taken[name] = got
        except Stopping:
            await self._release(taken)
            raise
        return taken

    async def _receive(self, queue: str, wait_s: float) -> tuple[ReceivedMessage, Any] | None:
        got = await self.client.receive(queue, 1, self._vt(queue), wait_time_s=wait_s)
        if not got:
            return None
        m = got[0]
        try:
            entry = json.loads(m.body)
        except ValueError:
            entry = {"body": m.body.decode("utf-8", "replace")}
        return m, entry

    def _vt(self, queue: str) -> float:
        return self.visibility.get(queue, DEFAULT_VISIBILITY_S)

    async def _idle(self, seconds: float) -> None:
        if self.stop.is_set():
            raise Stopping("stopping")
        if seconds:
            await asyncio.sleep(seconds)

    async def _extend(self, taken: dict[str, tuple[ReceivedMessage, Any]]) -> None:
        for name, (m, _) in taken.items():
            await self.client.change_visibility(name, [m.id], self._vt(name), m.addr or None)

    async def _release(self, taken: dict[str, tuple[ReceivedMessage, Any]]) -> None:
        for name, (m, _) in taken.items():
            with contextlib.suppress(DynaqError):  # else its visibility runs out instead
                await self.client.release(name, [m.id], m.addr or None)
