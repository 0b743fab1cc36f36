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
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
from aiohttp import HttpVersion11, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from dynaq.api.content_coding import content_codings, decode_body
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

SERVER_OPTIONS: dict[str, Any] = {"auto_decompress": False}
"""The aiohttp server options request bodies need (``web.Application(handler_args=...)``):
:func:`read_raw` decodes ``Content-Encoding`` itself, strictly and within the
route's limit. aiohttp's own decoder accepts a stream that stops before its end
(a truncated upload, a client that never closed its compressor) as if it were
whole, lets a list of codings through undecoded, and answers a coding it lacks
(``zstd``) with a plain-text 400 before any route runs."""

_DECODED = web.RequestKey("dynaq_decoded_body", bytes)
"""Where :func:`read_raw` keeps a request's decoded body (it is read more than once)."""


async def read_raw(request: web.Request, max_bytes: int | None = None) -> bytes:
    """The request body, decoded from its ``Content-Encoding``; it must arrive within
    the node's ``http.body_timeout_s`` (a client that trickles a body cannot hold a
    handler forever): 408 otherwise.

    Decoding is strict: a coding the node lacks is a 415, and a stream that does
    not end as its format says (truncated, trailing bytes, a bad checksum) a 400
    ``malformed_body``, never a shorter message. The decoded body is bounded by the
    limit the wire body has (the app's ``client_max_size``, and ``max_bytes``): a
    decompression bomb is a 413 once that many bytes come out, not before it has
    filled memory. Cached on the request: later calls cost nothing.
    """
    body: bytes | None = request.get(_DECODED)
    if body is None:
        codings = content_codings(request)  # 415 before reading a body for nothing
        limit = _body_limit(request, max_bytes)
        wire = await _read_wire(request)
        if codings and wire and request.content.total_compressed_bytes is None:
            # (Not None: aiohttp has decoded it already, SERVER_OPTIONS unset.)
            body = await asyncio.to_thread(decode_body, wire, codings, limit)
        else:
            body = wire
        request[_DECODED] = body
    if max_bytes is not None and len(body) > max_bytes:
        raise PayloadTooLarge(f"this route takes bodies of at most {max_bytes} bytes")
    return body


async def _read_wire(request: web.Request) -> bytes:
    """The body's bytes as sent (see :func:`read_raw`)."""
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
        # A body that does not match its framing (or, decoded by aiohttp, its
        # Content-Encoding): the client's mistake, not ours.
        raise MalformedBody(f"the request body could not be read: {exc}") from None
    except ConnectionResetError:
        # The client closed its connection before its body arrived: nobody
        # reads the answer, and it is no error of the node's.
        raise MalformedBody("the client closed the connection before its body arrived") from None


def _body_limit(request: web.Request, max_bytes: int | None) -> int | None:
    limits = [n for n in (request.client_max_size, max_bytes) if n]
    return min(limits) if limits else None


ExpectHandler = Callable[[web.Request], Awaitable[web.StreamResponse | None]]


def expect_within(limit: Callable[[web.Request], int] | None = None) -> ExpectHandler:
    """A route's ``expect_handler`` (``routes.put(path, expect_handler=...)``):
    ``Expect: 100-continue`` gets ``100 Continue`` only for a body the route may
    take. A ``Content-Length`` over the app's ``client_max_size``, or over
    ``limit(request)`` (the route's own limit, say the message size), is answered
    413 at once, so the client never uploads it; an ``Expect`` other than
    ``100-continue`` is a 417. aiohttp runs it before the middleware, so it
    answers in the middleware's JSON shape itself."""

    async def expect(request: web.Request) -> web.StreamResponse | None:
        if request.version != HttpVersion11:
            return None  # HTTP/1.0 has no 100 Continue
        value = request.headers.get("Expect", "")
        if value.lower() != "100-continue":
            return json_response(
                {"error": f"unsupported Expect {value!r}", "code": "http_error"}, 417
            )
        most = _body_limit(request, None if limit is None else limit(request))
        length = request.content_length
        if most is not None and length is not None and length > most:
            exc = PayloadTooLarge(f"a body of {length} bytes; this route's limit is {most}")
            resp = json_response({"error": exc.message, "code": exc.code}, exc.status)
            resp.force_close()  # the body is never sent: the connection cannot carry on
            return resp
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # as aiohttp's own handler: the answer starts now
        return None

    return expect


expect_continue = expect_within()
"""The ``expect_handler`` for any route whose body limit is the app's ``client_max_size``."""


def caller_waiting(request: web.Request) -> Callable[[], bool]:
    """Whether ``request``'s client is still connected: a long poll asks before it
    serves, so a client that hung up (a timeout shorter than its wait) does not
    leave messages invisible for a visibility timeout."""

    def waiting() -> bool:
        transport = request.transport
        return transport is not None and not transport.is_closing()

    return waiting


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
    raw = await read_raw(request, max_bytes)
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
