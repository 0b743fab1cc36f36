"""v1 message routes: the topic publish route's size limit, and query parameters given twice.

``PUT /v1/topics/:topic/message`` takes one message, so it is bounded like the queue
route: the message size limit (256 KiB here), refused from ``Content-Length`` (or at
``Expect: 100-continue``) before the body is sent or read, and a compressed body is
cut off once that much has been decoded. A v1 query parameter given twice is a 422:
no copy is silently preferred.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable

import aiohttp
import pytest

from dynaq.node import Node

LIMIT = 256 * 1024
"""The node fixture's message size limit (``queues.max_message_bytes``' default)."""


@pytest.fixture
async def topic(http: aiohttp.ClientSession) -> str:
    """Topic ``t1`` with queue ``q1`` subscribed."""
    for path in ("/v1/queues/q1", "/v1/topics/t1", "/v1/topics/t1/queues/q1"):
        async with http.put(path) as r:
            assert r.status in (200, 201), await r.text()
    return "t1"


async def _bodies(http: aiohttp.ClientSession) -> list[str]:
    async with http.get("/v1/queues/q1/messages/100") as r:
        assert r.status == 200
        return [m["body"] for m in await r.json()]


async def _first_answer(node: Node, head: bytes, wait_s: float = 5.0) -> bytes:
    """The head of the node's answer to ``head`` (a request whose body is never sent)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
    try:
        writer.write(head)
        await writer.drain()
        return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), wait_s)
    finally:
        writer.close()


def _head(path: str, length: int, *extra: str) -> bytes:
    lines = [f"PUT {path} HTTP/1.1", "Host: x", f"Content-Length: {length}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


# the topic publish route's size limit --------------------------------------------------


async def test_publish_expecting_100_continue_over_the_message_limit_is_413_at_once(
    node: Node, topic: str
) -> None:
    head = _head(f"/v1/topics/{topic}/message", LIMIT + 1, "Expect: 100-continue")
    answer = await _first_answer(node, head)
    assert answer.startswith(b"HTTP/1.1 413 "), answer  # never "100 Continue"
    assert b"application/json" in answer


async def test_publish_over_the_message_limit_is_413_before_its_body_is_read(
    node: Node, topic: str
) -> None:
    """17 MB declared (over the request limit too) and never sent: the answer comes at
    once from ``Content-Length``, and names the message limit, not the request limit."""
    reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
    try:
        writer.write(_head(f"/v1/topics/{topic}/message", 17_000_000))
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 413 "), head
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        body = await asyncio.wait_for(reader.readexactly(length), 5)
    finally:
        writer.close()
    error = json.loads(body)
    assert error["code"] == "payload_too_large"
    assert f"the limit is {LIMIT}" in error["error"], error


async def test_publish_stops_decoding_a_gzip_bomb_at_the_message_limit(
    http: aiohttp.ClientSession, topic: str
) -> None:
    """8 MiB of zeros in 8 KiB of gzip (under the 16 MiB request limit): refused once
    the message limit has come out, not after all 8 MiB were inflated."""
    bomb = gzip.compress(b"\0" * (8 * 1024 * 1024), mtime=0)
    assert len(bomb) < 16 * 1024

    async def send() -> tuple[int, str]:
        async with http.put(
            f"/v1/topics/{topic}/message", data=bomb, headers={"Content-Encoding": "gzip"}
        ) as r:
            return r.status, await r.text()

    (status, text), peak = await _peak_during(send)
    assert status == 413, text
    assert json.loads(text)["code"] == "payload_too_large"
    assert peak < 3 * 1024 * 1024, f"{peak} bytes allocated for a {LIMIT}-byte limit"
    assert await _bodies(http) == []


async def _peak_during(
    send: Callable[[], Awaitable[tuple[int, str]]],
) -> tuple[tuple[int, str], int]:
    """``send()``'s result, and the most memory allocated meanwhile (client and node
    share this process, so the node's decoding shows)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        got = await send()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return got, peak - before


async def test_publish_within_the_limit_with_expect_100_continue_is_delivered(
    http: aiohttp.ClientSession, topic: str
) -> None:
    async with http.put(f"/v1/topics/{topic}/message", data=b"x" * LIMIT, expect100=True) as r:
        assert r.status == 200, await r.text()
        assert set(await r.json()) == {"q1"}
    assert await _bodies(http) == ["x" * LIMIT]


# query parameters given twice ----------------------------------------------------------


def _item(batch: int, index: int) -> str:
    return f"{batch}:{uuid.UUID(int=batch)}:{index}"


@pytest.mark.parametrize("route", ["/v1/queues/q1/message", "/v1/topics/t1/message"])
@pytest.mark.parametrize("second", [_item(2, 5), _item(1, 0)], ids=["different", "same"])
async def test_batch_item_id_given_twice_is_422(
    http: aiohttp.ClientSession, topic: str, route: str, second: str
) -> None:
    params = [("batch_item_id", _item(1, 0)), ("batch_item_id", second)]
    async with http.put(route, params=params, data=b"x") as r:
        assert r.status == 422, await r.text()
        assert r.content_type == "application/json"
        error = await r.json()
    assert error["code"] == "invalid_input", error
    assert "batch_item_id" in error["error"]
    assert await _bodies(http) == []  # nothing enqueued or published
