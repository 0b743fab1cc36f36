"""Every malformed input is a precise 4xx with the JSON error body: never a 5xx.

One test per class of shape that used to reach a 500: non-ASCII digits,
lone surrogates, integers too large for a float or for storage, JSON's
non-standard constants, nesting past the interpreter's stack, unhashable
msgpack keys, names ending in a newline, tags whose UTF-8 outgrows a store
key, and attributes that bypassed the size limit. Requests that are not HTTP
at all are the exception: aiohttp's parser answers them with a plain 400
before the app runs (the last test says why).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from typing import Any

import aiohttp
import msgpack
import pytest

from dynaq.node import Node


async def _check_4xx(r: aiohttp.ClientResponse, status: int | None = None) -> dict[str, Any]:
    assert 400 <= r.status < 500, (r.status, await r.text())
    if status is not None:
        assert r.status == status, (r.status, await r.text())
    assert r.content_type == "application/json"
    body = await r.json()
    assert set(body) == {"error", "code"} and body["error"] and body["code"]
    return dict(body)


@pytest.fixture
async def queue(http: aiohttp.ClientSession) -> str:
    async with http.put("/v1/queues/q") as r:
        assert r.status == 201
    return "q"


@pytest.mark.parametrize(
    "text",
    ["²", "١٢", "1²", "𝟙", "-1", "1e3", "9" * 25, "0x10"],  # noqa: RUF001 - on purpose
)
async def test_non_ascii_and_odd_ids(http: aiohttp.ClientSession, queue: str, text: str) -> None:
    async with http.delete(f"/v1/queues/{queue}/message/{text}") as r:
        await _check_4xx(r, 422)
    async with http.get(f"/v1/queues/{queue}/message/{text}") as r:
        await _check_4xx(r, 422)
    async with http.get(f"/v2/queues/{queue}/snapshot", params={"limit": text}) as r:
        await _check_4xx(r, 422)
    async with http.get(f"/v1/queues/{queue}/messages/{text}") as r:
        await _check_4xx(r, 422)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"messages":[{"body":"\\ud800"}]}',
        b'{"messages":[{"body":"x","attributes":{"k":"\\udfff"}}]}',
        b'{"messages":[{"body":"x","group":"\\ud83d"}]}',
        b'{"messages":[{"body":"x","dedup_id":"a\\uDC00"}]}',
        b'{"messages":[{"body":NaN}]}',
        b'{"messages":[{"body":"x"}],"extra":Infinity}',
        b"[" * 100_000,
        b'{"messages":' + b"[" * 5000 + b"]" * 5000 + b"}",
    ],
)
async def test_malformed_json_enqueue(http: aiohttp.ClientSession, queue: str, raw: bytes) -> None:
    headers = {"Content-Type": "application/json"}
    async with http.post(f"/v2/queues/{queue}/messages", data=raw, headers=headers) as r:
        await _check_4xx(r)


@pytest.mark.parametrize(
    "body",
    [
        {"max_messages": 1, "visibility_timeout_s": 10**400},
        {"max_messages": 1, "wait_time_s": -(10**400)},
        {"max_messages": 10**300},
        {"max_messages": 1, "visibility_timeout_s": "1"},
    ],
)
async def test_huge_numbers_on_receive(
    http: aiohttp.ClientSession, queue: str, body: dict[str, Any]
) -> None:
    async with http.post(f"/v2/queues/{queue}/messages/receive", json=body) as r:
        await _check_4xx(r, 422)


@pytest.mark.parametrize(
    "patch",
    [
        {"max_partitions": 2**64},
        {"max_partitions": 10**300},
        {"min_partitions": 2**70},
        {"max_partition_age": 10**300},
        {"visibility_timeout": 10**400},
    ],
)
async def test_huge_settings(
    http: aiohttp.ClientSession, queue: str, patch: dict[str, Any]
) -> None:
    async with http.patch(f"/v1/queues/{queue}", json=patch) as r:
        await _check_4xx(r, 422)


@pytest.mark.parametrize(
    "raw",
    [
        b"\x81\x91\x01\x01",  # a map whose key is an array
        b"\x81\x81\x01\x01\x01",  # a map whose key is a map
        b"\x91" * 100_000,  # nesting
        b"\xc1",
    ],
)
async def test_malformed_msgpack(http: aiohttp.ClientSession, queue: str, raw: bytes) -> None:
    headers = {"Content-Type": "application/msgpack"}
    async with http.post(f"/v2/queues/{queue}/messages", data=raw, headers=headers) as r:
        await _check_4xx(r)


async def test_msgpack_request_with_json_answer(http: aiohttp.ClientSession, queue: str) -> None:
    """The body is parsed by its Content-Type; the answer follows Accept."""
    data = msgpack.packb({"messages": [{"body": b"\x00\xff"}]})
    headers = {"Content-Type": "application/msgpack", "Accept": "application/json"}
    async with http.post(f"/v2/queues/{queue}/messages", data=data, headers=headers) as r:
        assert r.status == 200 and r.content_type == "application/json"
        (mid,) = (await r.json())["ids"]
        assert isinstance(mid, str)


@pytest.mark.parametrize("name", ["a%0A", "a%0D", "%0A", "a%00", "a%20b"])
async def test_names_with_control_characters(http: aiohttp.ClientSession, name: str) -> None:
    async with http.put(f"/v1/queues/{name}") as r:
        await _check_4xx(r, 422)
    async with http.put(f"/v1/topics/{name}") as r:
        await _check_4xx(r, 422)


@pytest.mark.parametrize("tag", ["group", "dedup_id"])
async def test_tags_are_bounded_in_bytes(http: aiohttp.ClientSession, queue: str, tag: str) -> None:
    body = {"messages": [{"body": "x", tag: "😀" * 128}]}
    async with http.post(f"/v2/queues/{queue}/messages", json=body) as r:
        await _check_4xx(r, 422)
    body = {"messages": [{"body": "x", tag: "😀" * 32}]}  # 128 bytes: the limit
    async with http.post(f"/v2/queues/{queue}/messages", json=body) as r:
        assert r.status == 200


async def test_attributes_count_towards_the_size_limit(
    http: aiohttp.ClientSession, queue: str
) -> None:
    big = "v" * (200 * 1024)
    body = {"messages": [{"body": "x" * (100 * 1024), "attributes": {"a": big}}]}
    async with http.post(f"/v2/queues/{queue}/messages", json=body) as r:
        await _check_4xx(r, 413)


async def _raw(node: Node, request_bytes: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send bytes no HTTP client library would, and read the whole answer."""
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


@pytest.mark.parametrize(
    ("what", "request_bytes", "status"),
    [
        (
            "a token that is not text",
            b"GET /v1/queues HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Authorization: Bearer \xff\xfe\r\n\r\n",
            None,  # 401 with tokens configured; the node here has none: 200
        ),
        (
            "a batch item header that is not text",
            b"PUT /v1/queues/q/message HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"X-Dynaq-Batch-Item: \xfe\xff\r\nContent-Length: 1\r\n\r\nx",
            422,
        ),
        (
            "gzip that is not gzip",
            b"POST /v2/queues/q/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nContent-Encoding: gzip\r\n"
            b'Content-Length: 27\r\n\r\n{"messages":[{"body":"x"}]}',
            400,
        ),
        (
            "br that is not br",
            b"POST /v2/queues/q/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nContent-Encoding: br\r\n"
            b'Content-Length: 27\r\n\r\n{"messages":[{"body":"x"}]}',
            400,
        ),
        (
            "a gzip header and a stream that stops before its end",
            b"POST /v2/queues/q/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nContent-Encoding: gzip\r\n"
            b"Content-Length: 11\r\n\r\n\x1f\x8b\x08\x00garbage",
            400,
        ),
        (
            "deflate that is not deflate",
            b"PUT /v1/queues/q/message HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Encoding: deflate\r\nContent-Length: 5\r\n\r\nhello",
            400,
        ),
    ],
)
async def test_undecodable_headers_and_bodies_are_4xx(
    node: Node, queue: str, what: str, request_bytes: bytes, status: int | None
) -> None:
    got, headers, body = await _raw(node, request_bytes)
    if status is None:
        assert got < 500, (what, got, body)
        return
    assert got == status, (what, got, body)
    assert headers["content-type"].startswith("application/json"), (what, headers)


@pytest.mark.parametrize(
    ("target", "content_type", "answer_type"),
    [
        ("AmazonSQS.ListQueues", "application/x-amz-json-1.0", "application/x-amz-json-1.0"),
        (None, "application/x-www-form-urlencoded", "text/xml"),
    ],
)
async def test_sqs_and_sns_answer_undecodable_bodies_in_their_own_shape(
    node: Node, target: str | None, content_type: str, answer_type: str
) -> None:
    head = f"X-Amz-Target: {target}\r\n" if target else ""
    got, headers, body = await _raw(
        node,
        b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        + f"Content-Type: {content_type}\r\n{head}".encode()
        + b"Content-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}",
    )
    assert got == 400, body
    assert headers["content-type"].startswith(answer_type), headers
    assert b"could not be read" in body, body


def test_a_body_the_client_garbled_is_logged_as_its_fault_not_an_error() -> None:
    """aiohttp logs an unreadable body (once the route has answered 400) with a
    traceback at error level; the node's log filter makes it one line at info."""
    from aiohttp.web_protocol import RequestPayloadError

    from dynaq.logs import ClientFaultFilter

    exc = RequestPayloadError("400, message:\n  Can not decode content-encoding: gzip")
    record = logging.LogRecord(
        "aiohttp.server",
        logging.ERROR,
        __file__,
        1,
        "Unhandled exception",
        (),
        (RequestPayloadError, exc, None),
    )
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    try:
        assert ClientFaultFilter().filter(record)
    finally:
        root.setLevel(level)
    assert record.levelno == logging.INFO and record.exc_info is None
    assert record.getMessage() == (
        "a client sent a malformed request: 400, message: Can not decode content-encoding: gzip"
    )
    other = logging.LogRecord("aiohttp.server", logging.ERROR, __file__, 1, "boom", (), None)
    assert ClientFaultFilter().filter(other) and other.levelno == logging.ERROR


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n",
        b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"PUT /v1/queues/q/message HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\nhi",
        b"GE(T /health HTTP/1.1\r\nHost: x\r\n\r\n",
        b"FOO /health HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\nX-N: a\x00b\r\n\r\n",
    ],
)
async def test_protocol_errors_are_aiohttps_plain_400(node: Node, request_bytes: bytes) -> None:
    """Requests that are not HTTP never reach a route or the middleware: aiohttp's
    parser answers a text/plain 400 and closes. aiohttp 3.14 has no supported way
    to shape that answer (aio-libs/aiohttp#3287 is open): ``RequestHandler.handle_error``
    is undocumented and ``web.Server`` builds the handler itself. The OpenAPI
    description says so. When aiohttp lets the app answer these, make them the
    JSON error body and change this test."""
    status, headers, _ = await _raw(node, request_bytes)
    assert status == 400, status
    assert headers["content-type"].startswith("text/plain"), headers


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/msgpack", msgpack.packb({"messages": [{}] * 30_000})),
        ("application/msgpack", msgpack.packb({"messages": [0] * 20_000})),
        ("application/json", b'{"messages":[' + b",".join([b"{}"] * 30_000) + b"]}"),
    ],
)
async def test_bodies_that_would_build_millions_of_objects_are_refused(
    http: aiohttp.ClientSession, queue: str, content_type: str, body: bytes
) -> None:
    """A few MB of empty maps cost a GB of memory once parsed: bounded while parsing."""
    headers = {"Content-Type": content_type}
    async with http.post(f"/v2/queues/{queue}/messages", data=body, headers=headers) as r:
        await _check_4xx(r, 422)


async def test_routes_that_carry_ids_refuse_big_bodies_before_parsing(
    http: aiohttp.ClientSession, queue: str
) -> None:
    padding = json.dumps({"max_messages": 1, "pad": "x" * (2 * 1024 * 1024)}).encode()
    headers = {"Content-Type": "application/json"}
    for route in ("receive", "delete", "visibility"):
        path = f"/v2/queues/{queue}/messages/{route}"
        async with http.post(path, data=io.BytesIO(padding), headers=headers) as r:
            await _check_4xx(r, 413)


async def test_a_client_gone_before_its_body_is_no_error_of_the_node(
    node: Node, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that sends part of a body and closes: the node logs no error (any
    client could flood the log so) and goes on serving."""
    caplog.set_level(logging.INFO)
    for path in (f"/v2/queues/{queue}/messages", f"/v1/queues/{queue}/message"):
        method = "POST" if path.startswith("/v2") else "PUT"
        _reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
        writer.write(
            f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Content-Length: 1000\r\n\r\n".encode()
            + b'{"messages": [{"body": "'
        )
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()
        await asyncio.sleep(0.1)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    status, _, _ = await _raw(node, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v2/queues/q/snapshot?limit=5&limit=6"),
        ("GET", "/v2/queues/q/snapshot?encoding=stored&encoding=stored"),
        ("PUT", "/v1/queues/q/message?batch_item_id=a&batch_item_id=b"),
        ("DELETE", "/api/v1/batch/exact/closed?since=1&since=2"),
        ("POST", "/api/v1/batch/estimated/1/incr?by=1&by=2"),
    ],
)
async def test_a_query_parameter_given_twice_is_refused(
    http: aiohttp.ClientSession, queue: str, method: str, path: str
) -> None:
    """No copy of a repeated parameter is silently preferred to the other."""
    async with http.request(method, path, data=b"x") as r:
        body = await _check_4xx(r, 422)
    assert "given 2 times" in body["error"]


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/api/unknown?x=1&x=2", 404),
        ("GET", "/v2/nothing/here?limit=1&limit=2", 404),
        ("PATCH", "/v2/queues/q/snapshot?limit=5&limit=6", 405),
    ],
)
async def test_an_unrouted_request_is_404_or_405_before_its_query_is_read(
    http: aiohttp.ClientSession, queue: str, method: str, path: str, status: int
) -> None:
    """Where a request goes is told first: a repeated parameter of a path that does
    not exist is a 404 (a method the path does not take, a 405), not a 422."""
    async with http.request(method, path) as r:
        await _check_4xx(r, status)
