"""Deletes that race store reads, for one queue on one node: so a message deleted while
a read was under way is never served from that read's rows.

A store read's snapshot may still hold a message deleted while the read was in
flight. So a reader takes a token (:meth:`DeleteRecord.begin_read`) before it
reads, and checks each row's id with :meth:`DeleteRecord.deleted_since` before
serving it; :meth:`DeleteRecord.note_deleted` records every delete. Pure
state, no I/O, event loop only (:class:`~dynaq.core.partitions.QueueState`
holds one per queue).

Guarantees:

- ``deleted_since(id, token)`` is true for every id noted deleted after the read
  holding ``token`` began, provided the reader checks before it ends the read, or
  right after :meth:`DeleteRecord.end_read` without awaiting in between.
- The record stays small: a delete is kept only while a read that began before
  it is in flight (none at all while no read is), and forgotten at the next
  :meth:`DeleteRecord.begin_read` after that.
"""

from __future__ import annotations

from collections.abc import Iterable


class DeleteRecord:
    """The deletes some read still in flight may not have seen, by delete sequence."""

    def __init__(self) -> None:
        self._active_reads: dict[int, int] = {}  # token -> reads holding it
        self._delete_seq = 0
        self.deleted: dict[int, int] = {}
        """Message id -> its delete's sequence number, in sequence order (read only)."""

    def begin_read(self) -> int:
        """Call before a store read whose rows may be served; returns a token.

        Readers check :meth:`deleted_since` right after :meth:`end_read`
        without awaiting in between, so deletes older than every read still
        in flight can be forgotten (that keeps the record small under load,
        when some read is nearly always in flight).
        """
        token = self._delete_seq
        self._active_reads[token] = self._active_reads.get(token, 0) + 1
        self._prune()
        return token

    def end_read(self, token: int) -> None:
        left = self._active_reads[token] - 1
        if left:
            self._active_reads[token] = left
        else:
            del self._active_reads[token]

    def _prune(self) -> None:
        if not self.deleted:
            return
        oldest = min(self._active_reads, default=self._delete_seq)
        stale: list[int] = []
        for mid, seq in self.deleted.items():  # in seq order: stop at the first live one
            if seq > oldest:
                break
            stale.append(mid)
        for mid in stale:
            del self.deleted[mid]

    def note_deleted(self, message_ids: Iterable[int]) -> None:
        # With no read in flight there is no snapshot to guard against.
        if self._active_reads:
            self._delete_seq += 1
            for mid in message_ids:
                self.deleted.pop(mid, None)  # keep the dict in seq order
                self.deleted[mid] = self._delete_seq

    def deleted_since(self, message_id: int, token: int) -> bool:
        """Whether ``message_id`` was deleted after the read holding ``token`` began."""
        return self.deleted.get(message_id, 0) > token
