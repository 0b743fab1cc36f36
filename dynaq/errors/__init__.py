"""The exception tree of dynaq.

Every error dynaq raises on purpose derives from :class:`DynaqError`, carries a
stable machine-readable ``code`` and the HTTP status the API answers with. The
HTTP layer maps them once, in one middleware; nothing else knows about status
codes. Import them from here; they live by kind in :mod:`.base` (the root),
:mod:`.requests` (the request itself is wrong), :mod:`.conflicts` (409s),
:mod:`.availability` (503s, 507) and :mod:`.client` (raised client-side).

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
    ├── CannotStart             503  a node process cannot start: its port is taken, or
    │                                another process serves its data directory
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

from dynaq.errors.availability import (
    CannotStart,
    ClusterFull,
    DecrIncomplete,
    IdClockStalled,
    InsufficientStorage,
    NotServing,
    ReplicationTimeout,
    SlotLost,
    StorageError,
    StorageUnavailable,
    StreamDeleting,
    StreamUnavailable,
)
from dynaq.errors.base import DynaqError
from dynaq.errors.client import ClientError, ServerUnavailable, UnexpectedResponse, Unreachable
from dynaq.errors.conflicts import (
    BatchClosed,
    Conflict,
    IndexTaken,
    OrderKeyDecreased,
    PublisherFenced,
    ReceiptsInUse,
    ReplicaOutOfStep,
    SchemaConflict,
    StaleReceipts,
    TaskNotRunning,
)
from dynaq.errors.requests import (
    AlreadyExists,
    BadRecord,
    BatchNotFound,
    Forbidden,
    InvalidInput,
    InvalidName,
    MalformedBody,
    NotFound,
    PayloadTooLarge,
    QueueNotFound,
    RequestTimeout,
    StreamNotFound,
    SubscriptionNotFound,
    TopicNotFound,
    Unauthorized,
    UnsupportedMediaType,
    WrongBatchMode,
)

__all__ = [
    "AlreadyExists",
    "BadRecord",
    "BatchClosed",
    "BatchNotFound",
    "CannotStart",
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
