"""Errors about the request itself: bad input (422), missing things (404), framing,
size, time, media type and access (400, 413, 408, 415, 401, 403).

A client that gets one of these must change the request; retrying it as it is
fails again.
"""

from __future__ import annotations

from dynaq.errors.base import DynaqError


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
