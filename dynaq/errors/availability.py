"""503s and 507: the node, the ring, a stream or the store cannot serve now.

They say nothing against the request; ``retriable`` says whether to send it
again (elsewhere, or later).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dynaq.errors.base import DynaqError


class ClusterFull(DynaqError):
    """Every writer slot is held by a live (or recently live) node."""

    status = 503
    code = "cluster_full"


class SlotLost(DynaqError):
    """Another node took this node's writer slot: it must stop drawing ids."""

    status = 503
    code = "writer_slot_lost"


class CannotStart(DynaqError):
    """The node process cannot start: its HTTP port is taken, or another process
    serves its data directory. Raised before it serves anything."""

    status = 503
    code = "cannot_start"


class NotServing(DynaqError):
    """The node is not in the ring yet (starting) or has left it (draining): receiving
    here could serve what another node serves. Retry, through another node if any."""

    status = 503
    code = "node_not_serving"
    retriable = True


class StreamUnavailable(DynaqError):
    """The stream cannot be served: its files carry a signature its schema does not
    have (it refuses to open), or it is being deleted."""

    status = 503
    code = "stream_unavailable"


class ReplicationTimeout(StreamUnavailable):
    """The append is durable on the stream's authority but fewer copies than a quorum
    confirmed it in time: it may be lost if the authority dies now. Retrying may
    append it twice."""

    code = "replication_timeout"


class StreamDeleting(StreamUnavailable):
    """The stream is being deleted: deletion waits for its listeners to finish."""

    code = "stream_deleting"
    retriable = True


class StorageError(DynaqError):
    """The storage backend failed. Backends translate their driver's errors to this."""

    status = 503
    code = "storage_error"


class StorageUnavailable(StorageError):
    """The store cannot be reached or is closed; retrying later may succeed."""

    code = "storage_unavailable"
    retriable = True


class DecrIncomplete(StorageUnavailable):
    """Some decrements of an estimated-mode request were applied and others were not.

    Carries the completions the applied ones made (reported nowhere else) and
    the failed entries, which alone are to be retried: retrying the applied
    ones would count them twice.
    """

    code = "decr_incomplete"

    def __init__(self, message: str, completions: Sequence[Any], failed: Sequence[Any]) -> None:
        super().__init__(message)
        self.completions = list(completions)
        self.failed = list(failed)


class IdClockStalled(StorageUnavailable):
    """Ids would outrun the persisted high-water mark (its refresh is failing)."""

    code = "id_clock_stalled"


class InsufficientStorage(StorageError):
    """The store is (nearly) full: writes that add messages are refused.

    The embedded store keeps a reserve of its map and of its disk for the
    writes that free space (deletes) and small records, so consumers can
    drain; once they have, writes succeed again: retry later.
    """

    status = 507
    code = "insufficient_storage"
    retriable = True
