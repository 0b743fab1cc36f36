"""Request bodies in a ``Content-Encoding``: the node decodes them itself, fully and
strictly, within the route's limit (``dynaq.api.codec.read_raw``).

A stream that stops before its end (a truncated upload, a client that never
closed its compressor), that has bytes after its end or a bad checksum is a 400
``malformed_body``, never a shorter message; a coding the node lacks is a 415 in
the JSON error shape; a decompression bomb is a 413 once the route's limit comes
out, not after it has filled memory.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import importlib
import json
import tracemalloc
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dynaq.clock import ManualClock
from dynaq.node import Node
from tests.fixtures.nodes import node_config

brotli: Any = importlib.import_module("brotli")

BODY = b"hello world " * 100
"""A message that compresses well, and whose truncation is easy to see."""


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def _raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


def _bad_crc(data: bytes) -> bytes:
    broken = bytearray(_gzip(data))
    broken[-8] ^= 0xFF  # the CRC-32 trailer
    return bytes(broken)


async def _error(r: aiohttp.ClientResponse, status: int, code: str) -> str:
    """The answer is ``status`` with dynaq's JSON error shape and ``code``; its message."""
    text = await r.text()
    assert r.status == status, text
    assert r.content_type == "application/json", text
    body = json.loads(text)
    assert body["code"] == code, body
    assert isinstance(body["error"], str)
    return str(body["error"])


@pytest.fixture
async def queue(http: aiohttp.ClientSession) -> str:
    async with http.put("/v1/queues/q1") as r:
        assert r.status == 201
    return "q1"


async def _v1_bodies(http: aiohttp.ClientSession, queue: str) -> list[bytes]:
    async with http.get(f"/v1/queues/{queue}/messages/100") as r:
        assert r.status == 200
        got = await r.json()
    return [
        base64.b64decode(m["body"]) if m.get("encoding") == "base64" else m["body"].encode()
        for m in got
    ]


async def _v1_enqueue(
    http: aiohttp.ClientSession, data: bytes, coding: str, queue: str = "q1"
) -> aiohttp.ClientResponse:
    async with http.put(
        f"/v1/queues/{queue}/message", data=data, headers={"Content-Encoding": coding}
    ) as r:
        await r.read()
        return r


# accepted and exact ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("coding", "encode"),
    [
        ("gzip", _gzip),
        ("x-gzip", _gzip),
        ("GZip", _gzip),
        ("gzip", lambda d: _gzip(d[:500]) + _gzip(d[500:])),  # two gzip members
        ("deflate", zlib.compress),  # zlib-wrapped, as RFC 9110 says
        ("deflate", _raw_deflate),  # raw deflate, as some clients send it
        ("br", brotli.compress),
        ("identity", lambda d: d),
        ("gzip, br", lambda d: brotli.compress(_gzip(d))),  # applied in order
        ("deflate,gzip", lambda d: _gzip(zlib.compress(d))),
        ("identity, gzip", _gzip),
    ],
    ids=lambda v: v if isinstance(v, str) else getattr(v, "__name__", ""),
)
async def test_v1_enqueue_decodes_and_round_trips(
    http: aiohttp.ClientSession, queue: str, coding: str, encode: Any
) -> None:
    r = await _v1_enqueue(http, encode(BODY), coding)
    assert r.status == 200
    assert await _v1_bodies(http, queue) == [BODY]


async def test_two_content_encoding_headers_are_one_list(
    http: aiohttp.ClientSession, queue: str
) -> None:
    headers = [("Content-Encoding", "gzip"), ("Content-Encoding", "br")]
    async with http.put(
        f"/v1/queues/{queue}/message", data=brotli.compress(_gzip(BODY)), headers=headers
    ) as r:
        assert r.status == 200, await r.text()
    assert await _v1_bodies(http, queue) == [BODY]


async def test_binary_body_round_trips_exactly(http: aiohttp.ClientSession, queue: str) -> None:
    body = bytes(range(256)) * 40
    r = await _v1_enqueue(http, _gzip(body), "gzip")
    assert r.status == 200
    assert await _v1_bodies(http, queue) == [body]


# refused, nothing stored -------------------------------------------------------------


_UNCLEAN = [
    ("truncated gzip", "gzip", _gzip(BODY)[: len(_gzip(BODY)) // 2], "end-of-stream"),
    ("gzip without its trailer", "gzip", _gzip(BODY)[:-8], "end-of-stream"),
    ("gzip, trailing garbage", "gzip", _gzip(BODY) + b"garbage", "follow the end"),
    ("gzip with a bad CRC", "gzip", _bad_crc(BODY), "corrupt"),
    ("gzip that is not gzip", "gzip", b"hello", "corrupt"),
    ("a gzip header and nothing", "gzip", b"\x1f\x8b\x08\x00garbage", "end-of-stream"),
    ("truncated zlib", "deflate", zlib.compress(BODY)[:-4], "end-of-stream"),
    ("raw deflate cut", "deflate", _raw_deflate(BODY)[:-3], "end-of-stream"),
    ("zlib, trailing garbage", "deflate", zlib.compress(BODY) + b"x", "follow the end"),
    ("truncated br", "br", brotli.compress(BODY)[:-3], "end-of-stream"),
    ("br that is one byte", "br", b"x", "end-of-stream"),
    ("br, trailing garbage", "br", brotli.compress(BODY) + b"xx", "corrupt"),
    ("a list decoded in the wrong order", "br, gzip", brotli.compress(_gzip(BODY)), "'gzip'"),
    ("a list, the inner coding cut", "gzip, br", brotli.compress(_gzip(BODY)[:-8]), "'gzip'"),
]


@pytest.mark.parametrize(
    ("what", "coding", "data", "says"),
    [pytest.param(*case, id=case[0]) for case in _UNCLEAN],
)
async def test_a_stream_that_does_not_end_cleanly_is_400(
    http: aiohttp.ClientSession, queue: str, what: str, coding: str, data: bytes, says: str
) -> None:
    message = await _error(await _v1_enqueue(http, data, coding), 400, "malformed_body")
    assert says in message, (what, message)
    assert await _v1_bodies(http, queue) == [], what


@pytest.mark.parametrize("coding", ["compress", "foo", "gzip, foo", "zstd", "x-compress"])
async def test_a_coding_the_node_lacks_is_415_json(
    http: aiohttp.ClientSession, queue: str, coding: str
) -> None:
    r = await _v1_enqueue(http, b"not decoded", coding)
    message = await _error(r, 415, "unsupported_media_type")
    assert "Content-Encoding" in message
    assert await _v1_bodies(http, queue) == []


async def test_zstd_is_a_json_415_not_aiohttps_text_400(node: Node) -> None:
    """aiohttp's own decoder answered "Please install `backports.zstd`" in plain text."""
    status, headers, body = await _raw(
        node,
        b"PUT /v1/queues/q1/message HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Content-Encoding: zstd\r\nContent-Length: 5\r\n\r\nhello",
    )
    assert status == 415, body
    assert headers["content-type"].startswith("application/json"), headers
    assert json.loads(body)["code"] == "unsupported_media_type"


# v2, topics ----------------------------------------------------------------------------


async def test_v2_json_body_in_gzip(http: aiohttp.ClientSession, queue: str) -> None:
    payload = json.dumps({"messages": [{"body": "über"}, {"body": "zwei"}]}).encode()
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    async with http.post(f"/v2/queues/{queue}/messages", data=_gzip(payload), headers=headers) as r:
        assert r.status == 200, await r.text()
        assert len((await r.json())["ids"]) == 2
    async with http.post(
        f"/v2/queues/{queue}/messages/receive",
        data=brotli.compress(b'{"max_messages": 10}'),
        headers={"Content-Type": "application/json", "Content-Encoding": "br"},
    ) as r:
        assert r.status == 200, await r.text()
        got = sorted(m["body"] for m in (await r.json())["messages"])
    assert got == ["zwei", "über"]


async def test_v2_truncated_gzip_is_400_and_enqueues_nothing(
    http: aiohttp.ClientSession, queue: str
) -> None:
    # Cut where the part before still inflates to valid JSON (one message of two).
    payload = json.dumps({"messages": [{"body": "a"}]}).encode() + b" " * 1000
    data = _gzip(payload)[:-8]
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    async with http.post(f"/v2/queues/{queue}/messages", data=data, headers=headers) as r:
        await _error(r, 400, "malformed_body")
    assert await _v1_bodies(http, queue) == []


async def test_v2_unknown_coding_is_415(http: aiohttp.ClientSession, queue: str) -> None:
    headers = {"Content-Type": "application/json", "Content-Encoding": "compress"}
    async with http.post(f"/v2/queues/{queue}/messages", data=b"{}", headers=headers) as r:
        await _error(r, 415, "unsupported_media_type")


async def test_topic_publish(http: aiohttp.ClientSession, queue: str) -> None:
    async with http.put("/v1/topics/t1") as r:
        assert r.status == 201
    async with http.put(f"/v1/topics/t1/queues/{queue}") as r:
        assert r.status == 200
    headers = {"Content-Encoding": "gzip"}
    async with http.put("/v1/topics/t1/message", data=_gzip(BODY)[:-4], headers=headers) as r:
        await _error(r, 400, "malformed_body")
    async with http.put(
        "/v1/topics/t1/message", data=b"x", headers={"Content-Encoding": "foo"}
    ) as r:
        await _error(r, 415, "unsupported_media_type")
    assert await _v1_bodies(http, queue) == []
    async with http.put("/v1/topics/t1/message", data=_gzip(BODY), headers=headers) as r:
        assert r.status == 200, await r.text()
        assert set(await r.json()) == {queue}
    assert await _v1_bodies(http, queue) == [BODY]


# bombs -------------------------------------------------------------------------------


async def _peak_during(send: Any) -> tuple[Any, int]:
    """What ``send()`` returns, and the most memory (this process: the node's and
    the test's) allocated meanwhile beyond what was allocated when it began."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        got = await send()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return got, peak - before


async def test_a_gzip_bomb_is_413_within_the_routes_limit(
    http: aiohttp.ClientSession, queue: str
) -> None:
    """10 MiB of zeros in 10 KiB of gzip, to a route that takes 1 MiB: refused once
    1 MiB has come out (aiohttp inflated all 10 MiB, then the route refused it)."""
    bomb = _gzip(b"\0" * (10 * 1024 * 1024))
    assert len(bomb) < 20 * 1024

    async def send() -> tuple[int, str]:
        headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
        async with http.post(
            f"/v2/queues/{queue}/messages/receive", data=bomb, headers=headers
        ) as r:
            return r.status, await r.text()

    (status, text), peak = await _peak_during(send)
    assert status == 413, text
    assert json.loads(text)["code"] == "payload_too_large"
    assert peak < 4 * 1024 * 1024, f"{peak} bytes allocated for a 1 MiB limit"


@pytest.fixture
async def small_node(tmp_path: Path) -> AsyncIterator[Node]:
    """A node whose requests take at most 1 MiB (``http.max_request_bytes``)."""
    config = node_config(tmp_path, http={"max_request_bytes": 1024 * 1024})
    n = Node(config, clock=ManualClock())
    await n.start()
    try:
        yield n
    finally:
        await n.stop()


@pytest.mark.parametrize("coding", ["gzip", "br", "deflate", "gzip, gzip"])
async def test_a_bomb_is_413_within_the_request_limit(small_node: Node, coding: str) -> None:
    zeros = b"\0" * (32 * 1024 * 1024)
    bomb = {
        "gzip": _gzip(zeros),
        "br": brotli.compress(zeros),
        "deflate": zlib.compress(zeros, 9),
        "gzip, gzip": _gzip(_gzip(zeros)),
    }[coding]
    url = f"http://127.0.0.1:{small_node.port}"
    async with aiohttp.ClientSession(base_url=url) as http:
        async with http.put("/v1/queues/q1") as r:
            assert r.status == 201

        async def send() -> tuple[int, str]:
            async with http.put(
                "/v1/queues/q1/message", data=bomb, headers={"Content-Encoding": coding}
            ) as r:
                return r.status, await r.text()

        (status, text), peak = await _peak_during(send)
        assert status == 413, text
        assert json.loads(text)["code"] == "payload_too_large"
        assert peak < 4 * 1024 * 1024, f"{peak} bytes allocated for a 1 MiB limit"
        assert await _v1_bodies(http, "q1") == []


# Expect: 100-continue ------------------------------------------------------------------


async def _raw(node: Node, request_bytes: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send bytes as they are, and read the answer until the node closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
    try:
        writer.write(request_bytes)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), headers, body


async def _first_answer(node: Node, head: bytes) -> bytes:
    """The status line the node answers ``head`` (a request without its body) with."""
    reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
    try:
        writer.write(head)
        await writer.drain()
        return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    finally:
        writer.close()


@pytest.mark.parametrize(
    ("path", "length"),
    [
        ("/v2/queues/q1/messages", 17 * 1024 * 1024),  # over http.max_request_bytes
        ("/v1/queues/q1/message", 300 * 1024),  # over the message limit (256 KiB)
    ],
)
async def test_expect_100_continue_over_the_limit_is_413_at_once(
    node: Node, queue: str, path: str, length: int
) -> None:
    head = (
        f"PUT {path} HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).replace("PUT /v2", "POST /v2")
    answer = await _first_answer(node, head.encode())
    assert answer.startswith(b"HTTP/1.1 413 "), answer
    assert b"application/json" in answer


async def test_expect_100_continue_within_the_limit_continues(
    http: aiohttp.ClientSession, queue: str
) -> None:
    async with http.put(
        f"/v1/queues/{queue}/message",
        data=_gzip(BODY),
        headers={"Content-Encoding": "gzip"},
        expect100=True,
    ) as r:
        assert r.status == 200, await r.text()
    assert await _v1_bodies(http, queue) == [BODY]
