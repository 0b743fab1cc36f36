"""Estimated mode's decrements, coalesced per batch: one header write for many callers.

Every caller of a hot estimated batch decrements the same header, and a header
changes only by a conditional put (:mod:`~dynaq.services.batches.headers`), so
applied one by one the decrements queue behind each other's durable write. On
one node they are coalesced instead: while an update of a batch's header is in
flight, the decrements that arrive for it wait, and the next update applies
all of them at once, in arrival order, in one conditional put.

What each caller gets is what its own part did: the counter right after its
part, and the completion if its part is the one that made the batch complete
(:meth:`Headers.complete_if_done` is asked after each part, and flips
``complete`` once, so exactly one part of one update can get it; the
completion record, the relay and the event are the header update's, as for
every completion). A caller is answered only once the update that holds its
part is durable (and, if it completed the batch, delivered as every
completion is); if that update fails, every caller of the group gets the
error and none of the group's parts applied (or, if the store cannot tell, as
with any write whose outcome is unknown, all of them did). A caller cancelled
before its group's update started is left out of it.

Across nodes nothing changes: each node's coalesced update is a conditional
put, retried on a conflict with the parts applied again to the header read anew.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

from dynaq.errors import WrongBatchMode
from dynaq.services.batches.headers import Headers
from dynaq.services.batches.records import ESTIMATED, BatchHeader, Completion


@dataclass(frozen=True)
class DecrResult:
    """What one caller's decrement did."""

    pending: int
    """The counter right after this decrement (others of its update may follow it)."""
    completion: Completion | None
    """The completion, if this decrement made the batch complete."""


@dataclass
class _Part:
    by: int
    future: asyncio.Future[DecrResult]


@dataclass
class _Group:
    waiting: list[_Part] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


class DecrCoalescer:
    """Decrements of estimated batches, at most one header update per batch in flight.

    A batch's group exists only while decrements of it wait or are being applied;
    its task is awaited by :meth:`drain` (and ends when no decrement waits).
    """

    def __init__(self, headers: Headers) -> None:
        self._headers = headers
        self._groups: dict[int, _Group] = {}

    @property
    def active(self) -> Mapping[int, object]:
        """The batches with decrements waiting or in flight (empty when idle)."""
        return self._groups

    async def drain(self) -> None:
        """Wait until every decrement waiting or in flight is answered."""
        while self._groups:
            tasks = [g.task for g in self._groups.values() if g.task is not None]
            if not tasks:
                return
            await asyncio.gather(*tasks, return_exceptions=True)

    async def decr(self, batch_id: int, by: int) -> DecrResult:
        """Subtract ``by`` (checked by the caller) from an estimated batch's counter.

        Raises what the header update raised: :class:`~dynaq.errors.BatchNotFound`,
        :class:`~dynaq.errors.WrongBatchMode` or a storage error.
        """
        g = self._groups.get(batch_id)
        if g is None:
            g = self._groups[batch_id] = _Group()
        future: asyncio.Future[DecrResult] = asyncio.get_running_loop().create_future()
        g.waiting.append(_Part(by, future))
        if g.task is None:
            g.task = asyncio.create_task(self._run(batch_id, g), name="batch-decrements")
        return await future

    async def _run(self, batch_id: int, g: _Group) -> None:
        try:
            while g.waiting:
                # Callers cancelled while waiting are left out: their parts never apply.
                parts = [p for p in g.waiting if not p.future.done()]
                g.waiting = []
                if not parts:
                    continue
                try:
                    results = await self._apply(batch_id, parts)
                except BaseException as exc:
                    for p in parts:
                        if p.future.done():
                            continue
                        if isinstance(exc, Exception):
                            p.future.set_exception(exc)
                        else:
                            p.future.cancel()
                    if not isinstance(exc, Exception):
                        raise
                else:
                    for p, result in zip(parts, results, strict=True):
                        if not p.future.done():
                            p.future.set_result(result)
        finally:
            g.task = None
            for p in g.waiting:  # only when this task itself was cancelled
                p.future.cancel()
            g.waiting = []
            self._groups.pop(batch_id, None)

    async def _apply(self, batch_id: int, parts: list[_Part]) -> list[DecrResult]:
        results: list[DecrResult] = []

        def change(h: BatchHeader) -> Completion | None:
            if h.mode != ESTIMATED:
                raise WrongBatchMode(f"batch {batch_id} is an {h.mode} batch")
            results.clear()  # a retried update applies every part again, to a newer header
            done: Completion | None = None
            for p in parts:
                h.pending -= p.by
                mine = self._headers.complete_if_done(batch_id, h)  # flips once, for one part
                done = done or mine
                results.append(DecrResult(h.pending, mine))
            return done

        await self._headers.update(batch_id, change)
        return results
