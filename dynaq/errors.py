"""The exception tree of dynaq.

Every error dynaq raises on purpose derives from :class:`DynaqError`, carries a
stable machine-readable ``code`` and the HTTP status the API answers with. The
HTTP layer maps them once, in one middleware; nothing else knows about status
codes.

::

    DynaqError
    ├── InvalidInput            422  malformed ids, wrong JSON types, bad batch sizes
    │   ├── InvalidName         422  queue/topic names outside the allowed pattern
    │   ├── WrongBatchMode      422  an exact batch on the estimated routes, or the reverse
    │   └── BadRecord           422  an outbox row that can never be published (it is parked)
    ├── NotFound                404
    │   ├── QueueNotFound
    │   ├── TopicNotFound
    │   ├── BatchNotFound            also a missing block of an exact batch
    │   ├── StreamNotFound
    │   └── SubscriptionNotFound     no listener with that id on that stream
    ├── AlreadyExists           422  (Dynamiq answers 422, not 409)
    ├── MalformedBody           400  a body that does not match its framing or Content-Encoding
    ├── PayloadTooLarge         413
    ├── RequestTimeout          408  the request body did not arrive in time
    ├── UnsupportedMediaType    415
    ├── Unauthorized            401  no credentials, or ones that do not check out (token, peer MAC)
    ├── Forbidden               403  the token lacks the permission the route needs
    ├── Conflict                409  a concurrent update won; retry
    │   ├── BatchClosed         409  items added to a closed batch (inherits ``retriable``)
    │   ├── OrderKeyDecreased   409  a stream entry's order key is below its predecessor's
    │   ├── SchemaConflict      409  a stream re-declared with an incompatible schema
    │   ├── PublisherFenced     409  a stream's publisher lease is held by another token
    │   ├── IndexTaken          409  a conditional append (``expect_index``) found the
    │   │                            stream at another size: that index is taken or not next
    │   ├── StaleReceipts       409  a transaction's receipts are not current: nothing applied
    │   ├── ReceiptsInUse       409  another request with these receipts is committing: retry
    │   ├── TaskNotRunning      409  a cancel of a task that has ended, or of a purge
    │   └── ReplicaOutOfStep    409  a stream's copy sent entries for an index it is not at
    ├── ClusterFull             503  every writer slot is held by a live node
    ├── SlotLost                503  another node took this node's writer slot: stop
    ├── NotServing              503  this node is starting or draining: retry (elsewhere)
    ├── StreamUnavailable       503  a stream refuses to open (signature mismatch) or
    │   │                            is being deleted
    │   ├── ReplicationTimeout  503  durable on the authority, not yet on a quorum of copies
    │   └── StreamDeleting      503  deletion waits for its listeners to finish
    ├── StorageError            503  the store failed; ``retriable`` says whether to retry
    │   ├── StorageUnavailable  503
    │   │   ├── IdClockStalled  503  ids would outrun their persisted high-water mark
    │   │   └── DecrIncomplete  503  some decrements of a request applied, others did not
    │   └── InsufficientStorage 507  the store is full: writes that add messages are
    │                                refused until consumers drain it (receives and
    │                                deletes keep working)
    ├── ClientError                  raised by :mod:`dynaq.client`, never answered by a node
    │   ├── Unreachable              no endpoint answered (refused, reset, timed out); retriable
    │   └── UnexpectedResponse       an answer without dynaq's error body (a proxy's 502
    │                                page, undecodable bytes); ``status`` is the HTTP status
    └── ServerUnavailable            :mod:`dynaq.testing`: an external server it starts
                                     (Cassandra, PostgreSQL, statsd) is not installed
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class DynaqError(Exception):
    """Root of every error dynaq raises deliberately."""

    status: int = 500
    code: str = "internal"
    retriable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def details(self) -> dict[str, Any]:
        """Members the error body carries besides ``error`` and ``code`` (none here)."""
        return {}


class InvalidInput(DynaqError):
    """The request is well-formed HTTP but its content is not acceptable."""

    status = 422
    code = "invalid_input"


class InvalidName(InvalidInput):
    """A queue or topic name does not match the allowed pattern."""

    code = "invalid_name"


class WrongBatchMode(InvalidInput):
    """An exact batch used through the estimated routes, or the reverse."""

    code = "wrong_batch_mode"


class BadRecord(InvalidInput):
    """An outbox row that can never be published as it is (it gets parked).

    Keeps :class:`InvalidInput`'s code: the relay parks such rows and never
    answers HTTP with it, so it never needed a code of its own.
    """


class NotFound(DynaqError):
    """The named resource does not exist."""

    status = 404
    code = "not_found"


class QueueNotFound(NotFound):
    """The named queue does not exist."""

    code = "queue_not_found"


class TopicNotFound(NotFound):
    """The named topic does not exist."""

    code = "topic_not_found"


class BatchNotFound(NotFound):
    """The batch (or the block an item id names) does not exist."""

    code = "batch_not_found"


class StreamNotFound(NotFound):
    """The named stream was never declared (or has been deleted)."""

    code = "stream_not_found"


class SubscriptionNotFound(NotFound):
    """No listener with that subscription id reads that stream (it may have ended)."""

    code = "subscription_not_found"


class AlreadyExists(DynaqError):
    """Creating something that exists already (Dynamiq answers 422)."""

    status = 422
    code = "already_exists"


class MalformedBody(DynaqError):
    """The body could not be read as sent: bad chunking, or a ``Content-Encoding``
    (gzip, deflate) the bytes are not in."""

    status = 400
    code = "malformed_body"


class PayloadTooLarge(DynaqError):
    """A message or request body is over the configured limit."""

    status = 413
    code = "payload_too_large"


class RequestTimeout(DynaqError):
    """The request body did not arrive within ``http.body_timeout_s``."""

    status = 408
    code = "request_timeout"


class UnsupportedMediaType(DynaqError):
    """The request's Content-Type is not one dynaq decodes."""

    status = 415
    code = "unsupported_media_type"


class Unauthorized(DynaqError):
    """No credentials, or credentials that do not check out: a missing or unknown bearer
    token, or a node-to-node request whose MAC is missing, forged, stale or replayed.

    ``challenge`` is the ``WWW-Authenticate`` value the 401 carries (RFC 9110 asks for one).
    """

    status = 401
    code = "unauthorized"

    def __init__(self, message: str, challenge: str = 'Bearer realm="dynaq"') -> None:
        super().__init__(message)
        self.challenge = challenge


class Forbidden(DynaqError):
    """The caller is known, but its token does not grant what the route needs."""

    status = 403
    code = "forbidden"


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


class ClusterFull(DynaqError):
    """Every writer slot is held by a live (or recently live) node."""

    status = 503
    code = "cluster_full"


class SlotLost(DynaqError):
    """Another node took this node's writer slot: it must stop drawing ids."""

    status = 503
    code = "writer_slot_lost"


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


class ReplicaOutOfStep(Conflict):
    """A stream's copy was sent entries for an index it is not at (it catches up again
    from its own size)."""

    code = "replica_out_of_step"


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


class ClientError(DynaqError):
    """Raised by the client library about the exchange itself, not by a node.

    ``status`` is the HTTP status seen (0: no answer at all). Errors a node
    answered with dynaq's JSON body are raised as their own classes
    (:class:`QueueNotFound`, :class:`NotServing`...), so one ``except`` works on
    both sides of the wire.
    """

    status = 0
    code = "client_error"

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class Unreachable(ClientError):
    """No endpoint answered: connection refused or reset, or the request timed out.

    Whether the request was processed is unknown unless it was never sent.
    """

    code = "unreachable"
    retriable = True

    def __init__(self, message: str, *, sent: bool = True) -> None:
        super().__init__(message)
        self.sent = sent
        """Whether the request may have reached a node (``False``: it never left)."""


class UnexpectedResponse(ClientError):
    """An answer that is not dynaq's: a proxy's error page, or bytes that do not decode."""

    code = "unexpected_response"

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message, status)
        # A proxy's 502/503/504 means the node behind it died or stalled: retry
        # what is safe to retry.
        self.retriable = status in (502, 503, 504)


class ServerUnavailable(DynaqError, RuntimeError):
    """An external server :mod:`dynaq.testing` starts (Cassandra, PostgreSQL, statsd,
    HAProxy) is not installed or would not start."""

    code = "server_unavailable"


__all__ = [
    "AlreadyExists",
    "BadRecord",
    "BatchClosed",
    "BatchNotFound",
    "ClientError",
    "ClusterFull",
    "Conflict",
    "DecrIncomplete",
    "DynaqError",
    "Forbidden",
    "IdClockStalled",
    "IndexTaken",
    "InsufficientStorage",
    "InvalidInput",
    "InvalidName",
    "MalformedBody",
    "NotFound",
    "NotServing",
    "OrderKeyDecreased",
    "PayloadTooLarge",
    "PublisherFenced",
    "QueueNotFound",
    "ReceiptsInUse",
    "ReplicaOutOfStep",
    "ReplicationTimeout",
    "RequestTimeout",
    "SchemaConflict",
    "ServerUnavailable",
    "SlotLost",
    "StaleReceipts",
    "StorageError",
    "StorageUnavailable",
    "StreamDeleting",
    "StreamNotFound",
    "StreamUnavailable",
    "SubscriptionNotFound",
    "TaskNotRunning",
    "TopicNotFound",
    "Unauthorized",
    "UnexpectedResponse",
    "Unreachable",
    "UnsupportedMediaType",
    "WrongBatchMode",
]
