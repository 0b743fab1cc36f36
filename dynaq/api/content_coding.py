"""Request bodies' ``Content-Encoding``, decoded strictly and within a limit.

aiohttp's own decoder accepts a stream that stops before its end (a truncated
upload, a client that never closed its compressor) as if it were whole, lets a
list of codings through undecoded, and answers a coding it lacks with a
plain-text 400. These decoders refuse the first (:class:`MalformedBody`), undo
a list last to first, and leave unknown codings to a 415; they stop at the
route's limit (:class:`PayloadTooLarge`), so a decompression bomb never holds
more than that limit plus one step.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from dynaq.errors import MalformedBody, PayloadTooLarge, UnsupportedMediaType

_STEP_BYTES = 256 * 1024
"""Most bytes a decoder yields at once: a bomb never holds more than its limit plus this."""
_MAX_CODINGS = 4
"""Most codings one body may be wrapped in (each decoded in full: a cost per layer)."""


def _brotli() -> Any:
    try:
        return importlib.import_module("brotli")
    except ImportError:  # not installed: "br" is refused (415), never stored undecoded
        return None


_BROTLI = _brotli()
CONTENT_CODINGS = ("gzip", "x-gzip", "deflate", *(("br",) if _BROTLI is not None else ()))
"""The ``Content-Encoding`` codings request bodies may use (and ``identity``)."""


def content_codings(request: web.Request) -> list[str]:
    """The body's codings in the order they were applied (``identity`` left out);
    :class:`UnsupportedMediaType` (415) for one the node cannot decode."""
    values = request.headers.getall("Content-Encoding", ())
    codings = [c.strip(" \t").lower() for v in values for c in v.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    for coding in codings:
        if coding not in CONTENT_CODINGS:
            raise UnsupportedMediaType(
                f"unsupported Content-Encoding {coding!r}: send "
                + ", ".join(CONTENT_CODINGS)
                + " or identity (a list is decoded last to first)"
            )
    if len(codings) > _MAX_CODINGS:
        raise UnsupportedMediaType(
            f"a body in {len(codings)} Content-Encodings: at most {_MAX_CODINGS} are decoded"
        )
    return codings


def decode_body(data: bytes, codings: Sequence[str], limit: int | None) -> bytes:
    """``data`` with ``codings`` (in the order they were applied) undone, last first.

    :class:`MalformedBody` for a stream that does not end cleanly: truncated, bytes
    after its end, a bad checksum or size. :class:`PayloadTooLarge` once the body
    passes ``limit``; a layer that is itself still encoded may pass it by the
    little a compressor can add to incompressible data, and no more.
    """
    for i in range(len(codings) - 1, -1, -1):
        coding = codings[i]
        most = limit
        if limit is not None and i > 0:
            most = limit + limit // 1024 + 1024  # still compressed: its worst expansion
        try:
            data = _unbrotli(data, most) if coding == "br" else _inflate(data, coding, most)
        except _TooLarge:
            raise PayloadTooLarge(
                f"the request body decodes to more than {limit} bytes, this route's limit"
            ) from None
        except _Corrupt as exc:
            where = f"Content-Encoding {coding!r}"
            if len(codings) > 1:
                where += f" (coding {i + 1} of {len(codings)})"
            raise MalformedBody(f"the request body could not be read: {where}: {exc}") from None
    return data


class _TooLarge(Exception):
    pass


class _Corrupt(Exception):
    pass


_NOT_ENDED = (
    "the stream stops before its end-of-stream marker: the body is truncated, "
    "or the client did not close its compressor"
)


def _inflate(data: bytes, coding: str, limit: int | None) -> bytes:
    """One gzip (RFC 1952: every member, CRC-32 and size checked) or deflate stream:
    zlib (RFC 1950, Adler-32 checked), or the raw deflate some clients send."""
    gzip = coding in ("gzip", "x-gzip")
    if gzip:
        wbits = 16 + zlib.MAX_WBITS
    elif (
        len(data) >= 2
        and data[0] & 0x0F == 8
        and data[0] >> 4 <= 7
        and ((data[0] << 8) | data[1]) % 31 == 0
    ):
        wbits = zlib.MAX_WBITS
    else:
        wbits = -zlib.MAX_WBITS
    out = bytearray()
    rest = data
    while True:
        d = zlib.decompressobj(wbits)
        try:
            pending = rest
            while not d.eof:
                room = _STEP_BYTES if limit is None else min(_STEP_BYTES, limit - len(out) + 1)
                chunk = d.decompress(pending, room)
                out += chunk
                if limit is not None and len(out) > limit:
                    raise _TooLarge
                pending = d.unconsumed_tail
                if not chunk and not pending:
                    break  # it wants more input, and there is none
        except zlib.error as exc:
            raise _Corrupt(f"the stream is corrupt ({exc})") from None
        if not d.eof:
            raise _Corrupt(_NOT_ENDED)
        rest = d.unused_data
        if not rest:
            return bytes(out)
        if not (gzip and rest[:2] == b"\x1f\x8b"):  # another gzip member may follow
            raise _Corrupt(f"{len(rest)} bytes follow the end of the stream")


def _unbrotli(data: bytes, limit: int | None) -> bytes:
    """One brotli stream (RFC 7932), to its end and no further."""
    d = _BROTLI.Decompressor()
    out = bytearray()
    pending = data
    try:
        while True:
            room = _STEP_BYTES if limit is None else min(_STEP_BYTES, limit - len(out) + 1)
            chunk = d.process(pending, output_buffer_limit=room)
            pending = b""
            out += chunk
            if limit is not None and len(out) > limit:
                raise _TooLarge
            if d.is_finished():
                return bytes(out)
            if d.can_accept_more_data() and not chunk:
                raise _Corrupt(_NOT_ENDED)  # it wants more input, and there is none
    except _BROTLI.error:
        raise _Corrupt("the stream is corrupt (not brotli, or bytes follow its end)") from None
