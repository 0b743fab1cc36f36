"""Estimated mode: one counter per batch, moved by N (see :mod:`dynaq.services.batches`).

Cheap, but an item acked twice is counted twice, so a batch can complete early.
"""

from __future__ import annotations

from collections.abc import Sequence

from dynaq.errors import BatchClosed, InvalidInput, WrongBatchMode
from dynaq.services.batches.headers import Headers
from dynaq.services.batches.records import ESTIMATED, BatchHeader, Completion


class EstimatedBatches:
    """Counting estimated batches up (``incr``) and down (``decr``)."""

    def __init__(self, headers: Headers, max_items: int) -> None:
        self._headers = headers
        self._max_items = max_items

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
        """Subtract every ``(batch_id, by)``; return the batches this call completed."""
        for _, by in acks:
            self._check_step(by)
        out: list[Completion] = []
        for batch_id, by in acks:

            def change(h: BatchHeader, batch_id: int = batch_id, by: int = by) -> Completion | None:
                if h.mode != ESTIMATED:
                    raise WrongBatchMode(f"batch {batch_id} is an {h.mode} batch")
                h.pending -= by
                return self._headers.complete_if_done(batch_id, h)

            _, done = await self._headers.update(batch_id, change)
            if done is not None:
                out.append(done)
        return out

    def _check_step(self, by: int) -> None:
        # The API has checked that ``by`` is an int; its range is the service's own.
        if by <= 0:
            raise InvalidInput("by must be a positive integer")
        if by > self._max_items:
            raise InvalidInput(f"by must be at most {self._max_items}")
