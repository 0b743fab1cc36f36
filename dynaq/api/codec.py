"""Request and response bodies in JSON or msgpack, chosen by Content-Type and Accept.

JSON carries message ids as decimal strings (JavaScript numbers cannot hold
every int64) and bodies as UTF-8 strings, or base64 with
``"encoding": "base64"`` when they are not valid UTF-8. msgpack carries ids as
integers and bodies as raw bytes.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
from collections.abc import Callable
from typing import Any

import msgpack
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from dynaq.errors import (
    InvalidInput,
    MalformedBody,
    PayloadTooLarge,
    RequestTimeout,
    UnsupportedMediaType,
)

MSGPACK_TYPES = ("application/msgpack", "application/x-msgpack", "application/vnd.msgpack")
JSON_TYPE = "application/json"

# One packer for the event loop thread: msgpack.packb builds a new Packer per
# call, which costs more than packing a 100-id response.
_packer = msgpack.Packer(use_bin_type=True)


def wants_msgpack(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    if any(t in accept for t in MSGPACK_TYPES):
        return True
    if JSON_TYPE in accept:
        return False
    return request.content_type in MSGPACK_TYPES


BODY_TIMEOUT = web.AppKey("body_timeout_s", float)


async def read_raw(request: web.Request) -> bytes:
    """The request body, which must arrive within the node's ``http.body_timeout_s``
    (a client that trickles a body cannot hold a handler forever): 408 otherwise."""
    try:
        if request.content.is_eof():
            # The whole body is already buffered (a small request arrives with
            # its headers): nothing can trickle, so skip the timer's cost.
            return await request.read()
        async with asyncio.timeout(request.app.get(BODY_TIMEOUT, 30.0)):
            return await request.read()
    except TimeoutError:
        raise RequestTimeout("the request body did not arrive in time") from None
    except (RequestPayloadError, HttpProcessingError) as exc:
        # A body that does not match its framing or Content-Encoding (say,
        # "gzip" on bytes that are not gzip): the client's mistake, not ours.
        raise MalformedBody(f"the request body could not be read: {exc}") from None
    except ConnectionResetError:
        # The client closed its connection before its body arrived: nobody
        # reads the answer, and it is no error of the node's.
        raise MalformedBody("the client closed the connection before its body arrived") from None


def sends_msgpack(request: web.Request) -> bool:
    """Whether the request body is msgpack (by Content-Type; the answer follows Accept)."""
    return request.content_type in MSGPACK_TYPES


SMALL_BODY_BYTES = 1024 * 1024
"""Bodies of routes that carry ids or settings, not messages (receive, delete,
visibility, batch calls): far above what they need, far below the message limit."""
MAX_ARRAY_LEN = 10_000
"""Longest array a body may hold: the most ids a request may name (batch acks)."""
MAX_MAP_LEN = 1_024
MAX_OBJECTS = 20_000
"""Most JSON objects or msgpack maps in one body: a message and its attributes
are two, and a request holds at most 1,000 messages."""
MAX_JSON_ARRAYS = 1_000_000
"""A cheap bound on ``[`` in a JSON body (some may sit inside strings): a body
of nested empty arrays would otherwise build millions of lists."""
_PARSE_OFF_LOOP_BYTES = 256 * 1024


async def read_body(
    request: web.Request,
    max_bytes: int | None = None,
    *,
    max_items: int = MAX_ARRAY_LEN,
    max_objects: int = MAX_OBJECTS,
) -> Any:
    """Decode a JSON or msgpack request body; :class:`InvalidInput` when malformed.

    Malformed covers every shape a decoder can choke on: bad bytes, nesting
    deeper than the interpreter's stack, unhashable msgpack map keys, JSON's
    ``NaN``/``Infinity`` (not JSON), and strings holding lone surrogates
    (they cannot be stored as UTF-8). Bounded: ``max_bytes`` (413 before
    parsing), at most :data:`MAX_OBJECTS` objects and :data:`MAX_ARRAY_LEN`
    items per msgpack array; a big body is parsed off the event loop.
    """
    if max_bytes is not None and (request.content_length or 0) > max_bytes:
        raise PayloadTooLarge(f"this route takes bodies of at most {max_bytes} bytes")
    raw = await read_raw(request)
    if max_bytes is not None and len(raw) > max_bytes:
        raise PayloadTooLarge(f"this route takes bodies of at most {max_bytes} bytes")
    ctype = request.content_type
    parse: Callable[[bytes], Any]
    if ctype in MSGPACK_TYPES:
        parse = functools.partial(parse_msgpack, max_items=max_items, max_objects=max_objects)
    elif ctype in (JSON_TYPE, "application/octet-stream", "text/plain", ""):
        parse = functools.partial(parse_json, max_objects=max_objects)
    else:
        raise UnsupportedMediaType(
            f"unsupported Content-Type {ctype!r}: send application/json or application/msgpack"
        )
    if len(raw) > _PARSE_OFF_LOOP_BYTES:
        return await asyncio.to_thread(parse, raw)
    return parse(raw)


def parse_msgpack(
    raw: bytes, *, max_items: int = MAX_ARRAY_LEN, max_objects: int = MAX_OBJECTS
) -> Any:
    """Parse a msgpack body strictly and within bounds (see :func:`read_body`)."""
    try:
        return msgpack.unpackb(
            raw,
            raw=False,
            strict_map_key=False,
            max_array_len=max_items,
            max_map_len=MAX_MAP_LEN,
            max_ext_len=0,
            object_hook=_counted_maps(max_objects),
        )
    except (ValueError, TypeError, RecursionError, msgpack.UnpackException) as exc:
        raise InvalidInput(f"malformed msgpack body: {exc}") from None


def _counted_maps(most: int) -> Any:
    seen = 0

    def hook(obj: dict[Any, Any]) -> dict[Any, Any]:
        nonlocal seen
        seen += 1
        if seen > most:
            raise ValueError(f"more than {most} maps or objects")
        return obj

    return hook


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_MAX_DEPTH = 64


def _check_strings(value: Any, depth: int = 0) -> None:
    """Refuse strings that hold lone surrogates (``"\\ud800"``), and deep nesting."""
    if depth > _MAX_DEPTH:
        raise InvalidInput(f"malformed JSON body: nested deeper than {_MAX_DEPTH} levels")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput("malformed JSON body: a string holds a lone surrogate") from None
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_strings(k, depth + 1)
            _check_strings(v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _check_strings(v, depth + 1)


def parse_json(raw: bytes, *, max_objects: int = MAX_OBJECTS) -> Any:
    """Parse a JSON body strictly (see :func:`read_body`)."""
    if not raw.strip():
        # Also a body whose Content-Encoding stream ends before any data (say, a
        # gzip header and nothing it can inflate): the decoded body is empty.
        raise InvalidInput("request body is empty (once decoded); expected a JSON object")
    if raw.count(b"[") > MAX_JSON_ARRAYS:
        raise InvalidInput(f"malformed JSON body: more than {MAX_JSON_ARRAYS} arrays")
    try:
        data = json.loads(raw, parse_constant=_no_constant, object_hook=_counted_maps(max_objects))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidInput(f"malformed JSON body: {exc}") from None
    # Surrogates can only come from \u escapes (raw UTF-8 cannot hold them):
    # walk the value only when one may be there, so the usual body costs nothing.
    if b"\\u" in raw and (b"\\ud" in raw.lower()):
        _check_strings(data)
    return data


def respond(
    request: web.Request, data: Any, status: int = 200, binary: bool | None = None
) -> web.Response:
    """Serialize ``data`` as msgpack or JSON, as the client asked.

    ``binary`` is :func:`wants_msgpack` when the handler already computed it.
    """
    if wants_msgpack(request) if binary is None else binary:
        return web.Response(
            body=_packer.pack(data),
            status=status,
            content_type="application/msgpack",
        )
    return json_response(data, status)


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        text=json.dumps(data, separators=(",", ":")), status=status, content_type=JSON_TYPE
    )


def body_to_json(body: bytes) -> dict[str, str]:
    """A message body as JSON members: ``body`` (and ``encoding`` if base64)."""
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode("ascii"), "encoding": "base64"}


def body_from_wire(item: dict[str, Any], binary: bool, where: str) -> bytes:
    """Read a message body from a request item; validates types precisely."""
    body = item.get("body")
    encoding = item.get("encoding")
    if encoding not in (None, "utf-8", "base64"):
        raise InvalidInput(f"{where}.encoding must be 'utf-8' or 'base64'")
    if isinstance(body, bytes) and binary:
        return body
    if not isinstance(body, str):
        raise InvalidInput(f"{where}.body must be a string")
    if encoding == "base64":
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput(f"{where}.body is not valid base64") from None
    return body.encode("utf-8")
