"""The exception tree of dynaq.

Every error dynaq raises on purpose derives from :class:`DynaqError`, carries a
stable machine-readable ``code`` and the HTTP status the API answers with. The
HTTP layer maps them once, in one middleware; nothing else knows about status
codes.

::

    DynaqError
    ├── InvalidInput            422  malformed ids, wrong JSON types, bad batch sizes
    │   └── InvalidName         422  queue/topic names outside the allowed pattern
    ├── NotFound                404
    │   ├── QueueNotFound
    │   └── TopicNotFound
    ├── AlreadyExists           422  (Dynamiq answers 422, not 409)
    ├── PayloadTooLarge         413
    ├── UnsupportedMediaType    415
    ├── Conflict                409  a concurrent update won; retry
    └── StorageError            503  the store failed; ``retriable`` says whether to retry
        └── StorageUnavailable  503
"""

from __future__ import annotations


class DynaqError(Exception):
    """Root of every error dynaq raises deliberately."""

    status: int = 500
    code: str = "internal"
    retriable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(DynaqError):
    """The request is well-formed HTTP but its content is not acceptable."""

    status = 422
    code = "invalid_input"


class InvalidName(InvalidInput):
    """A queue or topic name does not match the allowed pattern."""

    code = "invalid_name"


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


class AlreadyExists(DynaqError):
    """Creating something that exists already (Dynamiq answers 422)."""

    status = 422
    code = "already_exists"


class PayloadTooLarge(DynaqError):
    """A message or request body is over the configured limit."""

    status = 413
    code = "payload_too_large"


class UnsupportedMediaType(DynaqError):
    """The request's Content-Type is not one dynaq decodes."""

    status = 415
    code = "unsupported_media_type"


class Conflict(DynaqError):
    """A concurrent writer changed the same record first; the caller may retry."""

    status = 409
    code = "conflict"
    retriable = True


class StorageError(DynaqError):
    """The storage backend failed. Backends translate their driver's errors to this."""

    status = 503
    code = "storage_error"


class StorageUnavailable(StorageError):
    """The store cannot be reached or is closed; retrying later may succeed."""

    code = "storage_unavailable"
    retriable = True


__all__ = [
    "AlreadyExists",
    "Conflict",
    "DynaqError",
    "InvalidInput",
    "InvalidName",
    "NotFound",
    "PayloadTooLarge",
    "QueueNotFound",
    "StorageError",
    "StorageUnavailable",
    "TopicNotFound",
    "UnsupportedMediaType",
]
