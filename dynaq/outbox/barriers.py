"""Per-key barriers of one relay term (goharvest's A5-A7), without head-of-line blocking.

goharvest's marker dispatches a batch's rows in id order and, at a row whose
key already has a record in flight, waits for that record to be purged; every
row after it waits too, whatever its key. With thousands of keys and a
thousand records in flight, about one row in ten meets a busy key, so the
marker spends most of its time waiting and batches are published one after
another instead of overlapping.

:class:`KeyBarriers` keeps the guarantee that matters (at most one record
per key in flight, and a key's records dispatched in the order they were
marked) while letting other keys go ahead: a row whose key is busy is held
in that key's own queue, and the release of the key's record hands the key
to the next held row. Held rows are marked but not in flight; if the term
ends they stay marked under its ``leader_id`` and the next term re-marks
them, as it re-marks rows that were in flight.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

from dynaq.outbox.schema import OutboxRecord

T = TypeVar("T")


class KeyBarriers(Generic[T]):
    """What is in flight, which record holds each key, and what waits behind a key.

    ``T`` is what the term carries with each row (its message, or why it can
    never be published).
    """

    def __init__(self) -> None:
        self.in_flight: dict[int, OutboxRecord] = {}
        """Dispatched and not yet purged, reset or parked (A6)."""
        self.keys: dict[str, int] = {}
        """Each busy key's record in flight (A7)."""
        self._held: dict[str, deque[tuple[OutboxRecord, T]]] = {}
        self.held = 0
        """How many marked rows wait behind a busy key."""

    def busy(self, key: str) -> bool:
        """A row of ``key`` must wait: one is in flight or an earlier one is held."""
        return key in self.keys or key in self._held

    def take(self, rec: OutboxRecord) -> None:
        """``rec`` is dispatched: it is in flight and holds its key."""
        self.in_flight[rec.id] = rec
        self.keys[rec.key] = rec.id

    def hold(self, rec: OutboxRecord, item: T) -> None:
        """``rec`` waits until the records of its key marked before it are done."""
        self._held.setdefault(rec.key, deque()).append((rec, item))
        self.held += 1

    def release(self, rec: OutboxRecord) -> bool:
        """``rec`` is done; return whether that freed its key."""
        self.in_flight.pop(rec.id, None)
        if self.keys.get(rec.key) == rec.id:
            del self.keys[rec.key]
            return True
        return False

    def next_held(self, key: str) -> tuple[OutboxRecord, T] | None:
        """The oldest row held behind ``key`` (taken out of the queue), if any."""
        waiting = self._held.get(key)
        if not waiting:
            return None
        first = waiting.popleft()
        if not waiting:
            del self._held[key]
        self.held -= 1
        return first

    def forget_held(self, rec: OutboxRecord) -> None:
        """Drop ``rec``'s held copy, if any: its earlier copy was published."""
        waiting = self._held.get(rec.key)
        if not waiting:
            return
        kept = deque(item for item in waiting if item[0].id != rec.id)
        self.held -= len(waiting) - len(kept)
        if kept:
            self._held[rec.key] = kept
        else:
            del self._held[rec.key]

    def clear_held(self) -> None:
        """Forget every held row (they stay marked; the next mark takes them again)."""
        self._held.clear()
        self.held = 0
