"""Response decoding and error mapping, with no I/O (both clients share it).

A node's error answer ``{"error", "code"}`` becomes the :mod:`dynaq.errors`
class with that code, so ``except QueueNotFound`` works in a client as in the
server; an unknown code falls back on the class for its status; an answer
without dynaq's body (a proxy's page) is :class:`UnexpectedResponse`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgpack

from dynaq import errors
from dynaq.errors import (
    DecrIncomplete,
    DynaqError,
    ReceiptsInUse,
    StaleReceipts,
    UnexpectedResponse,
)

MSGPACK = "application/msgpack"


def _own_codes() -> dict[str, type[DynaqError]]:
    """code → the class that defines it (not one that only inherits it)."""
    table: dict[str, type[DynaqError]] = {}
    for name in errors.__all__:
        cls = getattr(errors, name)
        code = vars(cls).get("code")
        if isinstance(code, str) and code not in table:
            table[code] = cls
    return table


CODES = _own_codes()
BY_STATUS: dict[int, type[DynaqError]] = {
    401: errors.Unauthorized,
    403: errors.Forbidden,
    404: errors.NotFound,
    408: errors.RequestTimeout,
    409: errors.Conflict,
    413: errors.PayloadTooLarge,
    415: errors.UnsupportedMediaType,
    422: errors.InvalidInput,
    503: errors.StorageUnavailable,
    507: errors.InsufficientStorage,
}


def decode(content_type: str, data: bytes) -> Any:
    """The body as Python data: msgpack, JSON, or text for ``text/plain``."""
    if content_type.startswith(MSGPACK):
        return msgpack.unpackb(data, strict_map_key=False)
    if content_type.startswith("text/"):
        return data.decode("utf-8", "replace")
    if not data:
        return None
    return json.loads(data)


def error_for(status: int, content_type: str, data: bytes, what: str) -> DynaqError:
    """The exception a ``status`` ≥ 400 answer stands for."""
    try:
        body = decode(content_type, data)
    except ValueError:
        body = None
    if not (isinstance(body, dict) and isinstance(body.get("code"), str)):
        text = data[:200].decode("utf-8", "replace").strip()
        return UnexpectedResponse(f"{what}: HTTP {status} {text}", status)
    code, message = body["code"], f"{what}: {body.get('error', '')}"
    if code == DecrIncomplete.code:
        return DecrIncomplete(message, body.get("batchCompletions", []), body.get("failed", []))
    for kind in (StaleReceipts, ReceiptsInUse):
        if code == kind.code and status == kind.status:
            return kind(message, [str(r) for r in body.get("receipts") or []])
    cls = CODES.get(code) or BY_STATUS.get(status)
    if cls is None or not issubclass(cls, DynaqError) or cls.status != status:
        # A code this client does not know with a status it does not expect.
        cls = BY_STATUS.get(status)
    if cls is None:
        return UnexpectedResponse(f"{what}: HTTP {status} {code}: {body.get('error', '')}", status)
    exc = cls(message)
    exc.code = code  # the node's own word, also for a code only the status placed
    return exc


def parse(status: int, content_type: str, data: bytes, what: str) -> Any:
    """Decoded success body, or raise what an error answer stands for."""
    if status >= 400:
        raise error_for(status, content_type, data, what)
    try:
        return decode(content_type, data)
    except ValueError as exc:
        raise UnexpectedResponse(f"{what}: undecodable {content_type} answer", status) from exc


def parse_lazily(status: int, content_type: str, data: bytes, what: Callable[[], str]) -> Any:
    """:func:`parse`, naming the request (``what()``) only when it raises: a success
    decodes without building that text (every request of a client goes through here)."""
    if status < 400:
        try:
            return decode(content_type, data)
        except ValueError:
            pass  # parse raises it, with the request named
    return parse(status, content_type, data, what())


def pack(body: Any) -> bytes:
    """A msgpack request body."""
    packed: bytes = msgpack.packb(body)
    return packed
