"""409s: the request met state that another request changed first (a concurrent
update, a stream's order, lease or size, a transaction's receipts, a task).

Each says through ``retriable`` whether sending it again can succeed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dynaq.errors.base import DynaqError


class Conflict(DynaqError):
    """A concurrent writer changed the same record first; the caller may retry."""

    status = 409
    code = "conflict"
    retriable = True


class TaskNotRunning(Conflict):
    """A task that has ended (or one that cannot be stopped) was asked to stop."""

    code = "task_not_running"
    retriable = False


class BatchClosed(Conflict):
    """Items cannot be added to a closed batch."""

    code = "batch_closed"


class OrderKeyDecreased(Conflict):
    """An appended entry's order key is lower than the one before it (the batch is refused)."""

    code = "order_key_decreased"
    retriable = False


class StaleReceipts(Conflict):
    """A transaction named receipts that are not current (received again since, expired,
    unknown, or their message already deleted); nothing of it was applied. Not
    retriable as is: receive the messages again."""

    code = "stale_receipt"
    retriable = False

    def __init__(self, message: str, receipts: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.receipts = list(receipts)

    def details(self) -> dict[str, Any]:
        return {"receipts": self.receipts}


class ReceiptsInUse(Conflict):
    """A transaction named receipts another transaction has claimed and may still commit
    (the same transaction sent again while the first is running, say). Nothing of
    this one was applied; retry it: the first's outcome decides the answer."""

    code = "receipts_in_use"

    def __init__(self, message: str, receipts: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.receipts = list(receipts)

    def details(self) -> dict[str, Any]:
        return {"receipts": self.receipts}


class SchemaConflict(Conflict):
    """A stream re-declared with a schema that is neither the same nor an extension
    (new ``oneOf`` variants), or with another order key."""

    code = "schema_conflict"
    retriable = False


class PublisherFenced(Conflict):
    """The stream's publisher lease is held and the request's token is not the holder's
    (missing, older or unknown): the append or release is refused."""

    code = "publisher_fenced"
    retriable = False


class IndexTaken(Conflict):
    """A publisher's conditional append (``expect_index=N``) found the stream holding
    other than ``N`` entries: nothing was written. Read the stream again and decide."""

    code = "index_taken"


class ReplicaOutOfStep(Conflict):
    """A stream's copy was sent entries for an index it is not at (it catches up again
    from its own size)."""

    code = "replica_out_of_step"
