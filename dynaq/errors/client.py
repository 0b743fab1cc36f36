"""Errors raised on the client side of the wire (the client library, the test
harness), never answered by a node.
"""

from __future__ import annotations

from dynaq.errors.base import DynaqError


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
