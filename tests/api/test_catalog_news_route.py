"""The catalog news route: a signed ``{kind, name}`` makes the node re-read that one
config record from the store at once (a change made through another node)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
import pytest

from dynaq.clock import ManualClock
from dynaq.core.hints import CATALOG_NEWS_PATH
from dynaq.core.peer_auth import PEER_AUTH_HEADER, PeerSigner, derive_peer_key
from dynaq.errors import QueueNotFound
from dynaq.node import Node
from dynaq.services.catalog import Catalog
from tests.fixtures.nodes import node_config

SECRET = "catalog-news-secret"


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    clock = ManualClock()
    n = Node(node_config(tmp_path, gossip={"key": SECRET}), clock=clock)
    await n.start()
    try:
        yield n
    finally:
        await n.stop()


async def _news(node: Node, message: Any) -> int:
    body = bytes(msgpack.packb(message))
    signer = PeerSigner(derive_peer_key(SECRET), node.clock.wall_ms)
    header = signer.header("POST", node.view.me.http_addr, CATALOG_NEWS_PATH, body)
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            f"http://127.0.0.1:{node.port}{CATALOG_NEWS_PATH}",
            data=body,
            headers={PEER_AUTH_HEADER: header},
        ) as r,
    ):
        await r.read()
        return r.status


def _other_node(node: Node) -> Catalog:
    """Another node's catalog on the same store (its changes are unannounced here)."""
    return Catalog(node.store, node.clock, node.config.queues)


async def test_news_of_a_queue_deleted_elsewhere_drops_it_at_once(node: Node) -> None:
    await node.catalog.create_queue("q")
    await _other_node(node).delete_queue("q")
    assert node.catalog.cached_queue("q") is not None  # trusted for a sync interval
    assert await _news(node, {"kind": "queue", "name": "q"}) == 200
    assert node.catalog.cached_queue("q") is None
    with pytest.raises(QueueNotFound):
        await node.catalog.queue("q")


async def test_news_of_a_topic_changed_elsewhere_is_read_at_once(node: Node) -> None:
    await node.catalog.create_queue("q")
    await node.catalog.create_topic("t")
    other = _other_node(node)
    await other.subscribe("t", "q")
    await other.create_topic("new")
    assert (await node.catalog.topic("t")).queues == ()
    assert await _news(node, {"kind": "topic", "name": "t"}) == 200
    assert await _news(node, {"kind": "topic", "name": "new"}) == 200
    assert (await node.catalog.topic("t")).queues == ("q",)
    assert await node.catalog.listed_topic_names() == ["new", "t"]


async def test_news_of_what_does_not_exist_is_taken(node: Node) -> None:
    assert await _news(node, {"kind": "queue", "name": "never"}) == 200
    assert await _news(node, {"kind": "topic", "name": "never"}) == 200


@pytest.mark.parametrize(
    "message",
    [{"kind": "stream", "name": "s"}, {"kind": "queue"}, {"kind": "queue", "name": ""}, [1, 2]],
)
async def test_malformed_news_is_422(node: Node, message: Any) -> None:
    assert await _news(node, message) == 422
