"""Estimated mode: one counter per batch, moved by N (see :mod:`dynaq.services.batches`).

Cheap, but an item acked twice is counted twice, so a batch can complete early.
Decrements of one batch on one node are coalesced into one header update
(:mod:`~dynaq.services.batches.decrements`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from dynaq.errors import (
    BatchClosed,
    BatchNotFound,
    DecrIncomplete,
    DynaqError,
    InvalidInput,
    WrongBatchMode,
)
from dynaq.services.batches.decrements import DecrCoalescer
from dynaq.services.batches.headers import Headers
from dynaq.services.batches.records import ESTIMATED, BatchHeader, Completion


@dataclass(frozen=True)
class DecrFailure:
    """One batch's decrement that was not applied, and why."""

    batch_id: int
    by: int
    error: DynaqError


class EstimatedBatches:
    """Counting estimated batches up (``incr``) and down (``decr``)."""

    def __init__(self, headers: Headers, max_items: int) -> None:
        self._headers = headers
        self._max_items = max_items
        self.decrements = DecrCoalescer(headers)

    async def drain(self) -> None:
        """Wait until every decrement waiting or in flight is answered."""
        await self.decrements.drain()

    async def incr(self, batch_id: int, by: int) -> BatchHeader:
        """Add ``by`` expected items to an open estimated batch."""
        self._check_step(by)

        def change(h: BatchHeader) -> Completion | None:
            if h.mode != ESTIMATED:
                raise WrongBatchMode(f"batch {batch_id} is an {h.mode} batch")
            if h.closed:
                raise BatchClosed(f"batch {batch_id} is closed: its count cannot grow")
            h.pending += by
            h.items += by
            return None

        header, _ = await self._headers.update(batch_id, change)
        return header

    async def decr(self, acks: Sequence[tuple[int, int]]) -> list[Completion]:
        """Subtract every ``(batch_id, by)``; return the batches this call completed.

        All or nothing for what can be known up front: every step is checked,
        and every batch read and checked to exist in estimated mode, before any
        is applied (a request naming one batch is checked by its update, which
        applies nothing if it refuses); one bad entry fails the request and
        changes nothing. The
        entries of one batch are applied together (in one conditional put, with
        other requests' decrements of that batch on this node). If the
        store fails some batches' updates after others applied, the call raises
        :class:`DecrIncomplete` with the completions made and the entries to retry.
        """
        for _, by in acks:
            self._check_step(by)
        totals: dict[int, int] = {}
        for batch_id, by in acks:
            totals[batch_id] = totals.get(batch_id, 0) + by
        if len(totals) == 1:
            return await self._decr_one(*next(iter(totals.items())))
        for batch_id, header in zip(totals, await self._headers.read_many(totals), strict=True):
            if header is None:
                raise BatchNotFound(f"batch {batch_id} does not exist")
            if header.mode != ESTIMATED:
                raise WrongBatchMode(f"batch {batch_id} is an {header.mode} batch")
        results = await asyncio.gather(
            *(self.decrements.decr(batch_id, by) for batch_id, by in totals.items()),
            return_exceptions=True,
        )
        out: list[Completion] = []
        failed: list[DecrFailure] = []
        for (batch_id, by), result in zip(totals.items(), results, strict=True):
            if isinstance(result, DynaqError):
                failed.append(DecrFailure(batch_id, by, result))
            elif isinstance(result, BaseException):
                raise result  # a cancellation or a bug: not a per-entry outcome
            elif result.completion is not None:
                out.append(result.completion)
        if failed:
            raise _incomplete(out, failed)
        return out

    async def _decr_one(self, batch_id: int, by: int) -> list[Completion]:
        # No read up front: the header update reads and checks the batch itself,
        # and a refusal (absent, wrong mode) applies nothing.
        try:
            result = await self.decrements.decr(batch_id, by)
        except (BatchNotFound, WrongBatchMode):
            raise
        except DynaqError as exc:
            raise _incomplete([], [DecrFailure(batch_id, by, exc)]) from exc
        return [] if result.completion is None else [result.completion]

    def _check_step(self, by: int) -> None:
        # The API has checked that ``by`` is an int; its range is the service's own.
        if by <= 0:
            raise InvalidInput("by must be a positive integer")
        if by > self._max_items:
            raise InvalidInput(f"by must be at most {self._max_items}")


def _incomplete(done: list[Completion], failed: list[DecrFailure]) -> DecrIncomplete:
    return DecrIncomplete(
        f"{len(failed)} of the request's batches were not decremented: retry only those",
        done,
        failed,
    )
