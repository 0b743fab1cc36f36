"""Connections and bodies are bounded in time and size before anything is parsed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from dynaq.config import config_from_mapping
from dynaq.errors import InvalidInput
from dynaq.node import Node
from tests.fixtures.nodes import node_config


async def _raw_request(port: int, head: bytes, body_parts: list[bytes], pause_s: float) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        for part in body_parts:
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(pause_s)
        return await asyncio.wait_for(reader.read(65536), 10)
    finally:
        writer.close()


async def test_a_trickled_body_times_out_with_408(tmp_path: Path) -> None:
    node = Node(node_config(tmp_path, http={"body_timeout_s": 0.5, "shutdown_timeout_s": 1.0}))
    await node.start()
    try:
        await node.catalog.create_queue("q")
        head = b"PUT /v1/queues/q/message HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
        answer = await _raw_request(node.port, head, [b"x"] * 3, 0.4)
        assert answer.startswith(b"HTTP/1.1 408")
        assert b'"code":"request_timeout"' in answer
    finally:
        await node.stop()


async def test_an_oversized_single_message_is_refused_before_its_body_is_read(
    http: aiohttp.ClientSession, node: Node
) -> None:
    await node.catalog.create_queue("q")
    limit = node.queues.limits.max_message_bytes
    head = (
        f"PUT /v1/queues/q/message HTTP/1.1\r\nHost: x\r\nContent-Length: {limit + 1}\r\n\r\n"
    ).encode()
    answer = await _raw_request(node.port, head, [b"x"], 0.0)  # 1 byte of the body sent
    assert answer.startswith(b"HTTP/1.1 413")
    assert b'"code":"payload_too_large"' in answer


async def test_idle_keep_alive_connections_are_closed(tmp_path: Path) -> None:
    node = Node(node_config(tmp_path, http={"keepalive_timeout_s": 0.3}))
    await node.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        await asyncio.sleep(1.5)
        rest = await asyncio.wait_for(reader.read(65536), 5)
        assert reader.at_eof(), rest  # the server closed the idle connection
        writer.close()
    finally:
        await node.stop()


def test_a_ring_on_node_local_stores_is_refused() -> None:
    config = config_from_mapping({"gossip": {"enabled": True}, "storage": {"backend": "embedded"}})
    with pytest.raises(InvalidInput, match="a ring needs one shared store"):
        Node(config)
    allowed = config_from_mapping({"gossip": {"enabled": True, "allow_node_local_store": True}})
    assert allowed.gossip.allow_node_local_store
