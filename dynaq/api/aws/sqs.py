"""Amazon SQS on the node: the AWS JSON 1.0 protocol current SDKs speak.

``POST /`` with ``X-Amz-Target: AmazonSQS.<Action>`` and a JSON body. SQS
queues *are* dynaq queues (one model: a message sent through either API is
received through either, and settings set through either show in both);
queue URLs are built from the Host the client used, so they stay valid
through any node and any balancer. Errors have SQS's shape and codes, so SDK
exceptions and retries behave as on AWS. Actions are in
:mod:`.sqs_queues`, :mod:`.sqs_messages` and :mod:`.sqs_move_tasks`; authentication in :mod:`.sigv4`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from dynaq.api.aws.sigv4 import AccessKey, verify
from dynaq.api.aws.sqs_attempts import ReceiveAttempts
from dynaq.api.aws.sqs_wire import SqsError, invalid, no_queue
from dynaq.api.codec import parse_json, read_raw
from dynaq.clock import Clock
from dynaq.core.access import ADMIN, READ, WRITE
from dynaq.errors import (
    AlreadyExists,
    DynaqError,
    Forbidden,
    InvalidInput,
    NotServing,
    PayloadTooLarge,
    QueueNotFound,
)

log = logging.getLogger(__name__)

TARGET_PREFIX = "AmazonSQS."
CONTENT_TYPE = "application/x-amz-json-1.0"


@dataclass(frozen=True)
class SqsSettings:
    """How the SQS endpoint authenticates: configured keys (``{}``: none), whether
    unsigned requests are let in, the region in ARNs, the clock signatures are
    checked against, and how soon after a purge another ``PurgeQueue`` is refused
    (0: never)."""

    keys: dict[str, AccessKey]
    anonymous: bool
    region: str
    clock: Clock
    purge_interval_s: float = 60.0
    attempts: ReceiveAttempts = field(default_factory=ReceiveAttempts)
    """Recent FIFO receives by ``ReceiveRequestAttemptId`` (:mod:`.sqs_attempts`)."""


SQS = web.AppKey("sqs", SqsSettings)


@dataclass(frozen=True)
class Call:
    """One SQS request: the HTTP request, its parameters, and who signed it."""

    request: web.Request
    params: dict[str, Any]
    key: AccessKey | None
    region: str

    def require(self, perm: str, queue: str) -> None:
        """AccessDenied unless the signing key's token may ``perm`` the queue."""
        token = None if self.key is None else self.key.token
        if token is not None and not token.allows(perm, "queue", queue):
            raise SqsError(
                "AccessDenied",
                f"Access to the resource {queue} is denied ({perm}).",
                status=403,
                query_code="AccessDenied",
            )


Action = Callable[[Call], Awaitable[dict[str, Any]]]
ACTIONS: dict[str, Action] = {}
"""Action name → handler (filled by :mod:`.sqs_queues`, :mod:`.sqs_messages`, :mod:`.sqs_move_tasks`)."""
PERMS = {"read": READ, "write": WRITE, "admin": ADMIN}


def action(name: str) -> Callable[[Action], Action]:
    def register(fn: Action) -> Action:
        ACTIONS[name] = fn
        return fn

    return register


def _as_sqs(exc: DynaqError) -> SqsError:
    """A dynaq error in SQS's vocabulary."""
    if isinstance(exc, QueueNotFound):
        return no_queue()
    if isinstance(exc, PayloadTooLarge):
        return invalid(exc.message)
    if isinstance(exc, InvalidInput):
        return invalid(exc.message)
    if isinstance(exc, AlreadyExists):
        return SqsError("QueueNameExists", exc.message, query_code="QueueAlreadyExists")
    if isinstance(exc, Forbidden):
        return SqsError("AccessDenied", exc.message, status=403, query_code="AccessDenied")
    if isinstance(exc, NotServing) or (exc.status >= 500 and getattr(exc, "retriable", False)):
        # A node draining, a full store (507 elsewhere; SQS has no such status), a
        # store briefly away: SDKs retry ServiceUnavailable, and the message says why.
        return SqsError("ServiceUnavailable", exc.message, status=503)
    if exc.status < 500:
        return invalid(exc.message)
    return SqsError("InternalFailure", exc.message, status=500)


async def authenticate(
    request: web.Request, body: bytes, settings: SqsSettings
) -> AccessKey | None:
    signed = request.headers.get("Authorization", "").startswith("AWS4-HMAC-SHA256")
    if settings.keys and (signed or not settings.anonymous):
        return verify(request, body, settings.keys, settings.clock)
    if settings.anonymous:
        return None
    raise SqsError(
        "AccessDenied",
        "This node takes SQS requests signed with a configured key ([aws] keys).",
        status=403,
        query_code="AccessDenied",
    )


async def endpoint(request: web.Request) -> web.StreamResponse:
    """``POST /``: dispatch an SQS action; every failure answers in SQS's shape."""
    target = request.headers.get("X-Amz-Target", "")
    try:
        result = await _dispatch(request, target)
    except SqsError as exc:
        if exc.status >= 500:
            log.warning("sqs request failed", extra={"action": target, "error": exc.message})
        return exc.response()
    return web.Response(body=json.dumps(result).encode(), content_type=CONTENT_TYPE)


async def _dispatch(request: web.Request, target: str) -> dict[str, Any]:
    if not target.startswith(TARGET_PREFIX):
        raise SqsError(
            "UnknownOperationException",
            "POST / takes SQS requests: set X-Amz-Target: AmazonSQS.<Action>",
        )
    name = target[len(TARGET_PREFIX) :]
    try:
        body = await read_raw(request)
    except DynaqError as exc:  # a body its Content-Encoding cannot decode, or too slow
        raise _as_sqs(exc) from None
    settings = request.app[SQS]
    key = await authenticate(request, body, settings)
    handler = ACTIONS.get(name)
    if handler is None:
        raise SqsError("InvalidAction", f"The action {name} is not valid for this endpoint.")
    params = _params(body)
    try:
        return await handler(Call(request, params, key, settings.region))
    except DynaqError as exc:
        raise _as_sqs(exc) from None


def _params(body: bytes) -> dict[str, Any]:
    if not body.strip():
        return {}
    try:
        # The REST API's strict parser: no NaN, no lone surrogates (they cannot be
        # stored as UTF-8), bounded nesting and object counts.
        params = parse_json(body)
    except InvalidInput as exc:
        raise SqsError("SerializationException", f"The request body is not JSON: {exc}") from None
    if not isinstance(params, dict):
        raise SqsError("SerializationException", "The request body must be a JSON object.")
    return params
