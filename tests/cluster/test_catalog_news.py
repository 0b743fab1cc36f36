"""Catalog news: a config change made through one node is acted on by the other nodes
before it is acknowledged, not one config sync (``sync.interval_s``) later.

The ring tests run 2 node processes on one Cassandra keyspace with a 30 s sync
interval, so only the news can explain what they see. The sender's own tests
run it against small HTTP servers standing in for peers that answer, refuse,
run an earlier version (404) or hang.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any

import msgpack
import pytest
from aiohttp import web

from dynaq.clock import SystemClock
from dynaq.cluster.catalog_news import HttpCatalogNews
from dynaq.core.hints import CATALOG_NEWS_PATH
from dynaq.core.membership import Member, MembershipView
from dynaq.core.peer_auth import PEER_AUTH_HEADER, PeerSigner
from dynaq.testing.cluster import LocalCluster
from dynaq.testing.servers.cassandra import CassandraServer
from tests.fixtures.cassandra import new_keyspace

SYNC_S = 30.0
"""Long enough that no config sync runs while a test looks."""


def _req(method: str, url: str, body: bytes | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            status, raw = int(r.status), r.read()
    except urllib.error.HTTPError as exc:
        status, raw = int(exc.code), exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, cassandra: CassandraServer
) -> Iterator[tuple[str, str]]:
    """The base URLs of 2 nodes of one ring on one Cassandra keyspace."""
    cluster = LocalCluster(
        tmp_path_factory.mktemp("news"),
        2,
        backend="cassandra",
        cassandra_hosts=[cassandra.host],
        keyspace=new_keyspace(),
        sync_interval_s=SYNC_S,
    )
    with cluster:
        yield cluster.nodes[0].url, cluster.nodes[1].url


def test_a_queue_deleted_through_one_node_takes_no_message_through_the_other(
    pair: tuple[str, str],
) -> None:
    one, two = pair
    assert _req("PUT", f"{one}/v1/queues/gone")[0] == 201
    assert _req("PUT", f"{two}/v1/queues/gone/message", b"warm")[0] == 200  # cached on two
    assert _req("DELETE", f"{one}/v1/queues/gone")[0] == 200
    assert _req("GET", f"{two}/v1/queues/gone")[0] == 404
    status, body = _req("PUT", f"{two}/v1/queues/gone/message", b"after the delete")
    assert status == 404, body


def test_a_settings_change_through_one_node_applies_at_once_on_the_other(
    pair: tuple[str, str],
) -> None:
    one, two = pair
    assert _req("PUT", f"{one}/v1/queues/patched")[0] == 201
    assert _req("GET", f"{two}/v1/queues/patched")[0] == 200  # cached on two
    patch = json.dumps({"visibility_timeout": 7}).encode()
    assert _req("PATCH", f"{one}/v1/queues/patched", patch)[0] == 200
    assert _req("GET", f"{two}/v1/queues/patched")[1]["VisibilityTimeout"] == 7


def test_an_unsubscribe_through_one_node_stops_publishes_through_the_other(
    pair: tuple[str, str],
) -> None:
    one, two = pair
    assert _req("PUT", f"{one}/v1/queues/unsub-q")[0] == 201
    assert _req("PUT", f"{one}/v1/topics/unsub")[0] == 201
    assert _req("PUT", f"{one}/v1/topics/unsub/queues/unsub-q")[0] == 200
    status, ids = _req("PUT", f"{two}/v1/topics/unsub/message", b"warm")  # cached on two
    assert status == 200 and list(ids) == ["unsub-q"]
    assert _req("DELETE", f"{one}/v1/topics/unsub/queues/unsub-q")[0] == 200
    assert _req("PUT", f"{two}/v1/topics/unsub/message", b"after") == (200, {})
    assert _req("DELETE", f"{one}/v1/topics/unsub")[0] == 200
    assert _req("PUT", f"{two}/v1/topics/unsub/message", b"after the delete")[0] == 404


def test_a_subscription_made_through_one_node_takes_publishes_through_the_other_at_once(
    pair: tuple[str, str],
) -> None:
    one, two = pair
    assert _req("PUT", f"{one}/v1/queues/sub-q")[0] == 201
    assert _req("PUT", f"{one}/v1/topics/sub")[0] == 201
    assert _req("PUT", f"{two}/v1/topics/sub/message", b"before") == (200, {})  # cached on two
    assert _req("PUT", f"{one}/v1/topics/sub/queues/sub-q")[0] == 200
    status, ids = _req("PUT", f"{two}/v1/topics/sub/message", b"after")
    assert status == 200 and list(ids) == ["sub-q"]


def test_a_topic_deleted_and_created_again_keeps_no_subscriber_on_the_other_node(
    pair: tuple[str, str],
) -> None:
    one, two = pair
    assert _req("PUT", f"{one}/v1/queues/again-q")[0] == 201
    assert _req("PUT", f"{one}/v1/topics/again")[0] == 201
    assert _req("PUT", f"{one}/v1/topics/again/queues/again-q")[0] == 200
    status, ids = _req("PUT", f"{two}/v1/topics/again/message", b"warm")
    assert status == 200 and list(ids) == ["again-q"]
    assert _req("DELETE", f"{one}/v1/topics/again")[0] == 200
    assert _req("PUT", f"{one}/v1/topics/again")[0] == 201
    assert _req("PUT", f"{two}/v1/topics/again/message", b"after") == (200, {})
    assert _req("GET", f"{two}/v1/topics/again") == (200, {"Queues": []})


def test_a_queue_deleted_through_one_node_cannot_be_subscribed_through_the_other(
    pair: tuple[str, str],
) -> None:
    one, two = pair
    assert _req("PUT", f"{one}/v1/queues/ghost-q")[0] == 201
    assert _req("PUT", f"{one}/v1/topics/ghost")[0] == 201
    assert _req("GET", f"{two}/v1/queues/ghost-q")[0] == 200  # cached on two
    assert _req("GET", f"{two}/v1/topics/ghost")[0] == 200
    assert _req("DELETE", f"{one}/v1/queues/ghost-q")[0] == 200
    assert _req("PUT", f"{two}/v1/topics/ghost/queues/ghost-q")[0] == 422
    assert _req("GET", f"{one}/v1/topics/ghost") == (200, {"Queues": []})


def test_what_is_created_through_one_node_is_listed_at_once_by_the_other(
    pair: tuple[str, str],
) -> None:
    one, two = pair
    assert "listed-q" not in _req("GET", f"{two}/v1/queues")[1]["queues"]
    assert _req("PUT", f"{one}/v1/queues/listed-q")[0] == 201
    assert _req("PUT", f"{one}/v1/topics/listed")[0] == 201
    assert "listed-q" in _req("GET", f"{two}/v1/queues")[1]["queues"]
    assert "listed" in _req("GET", f"{two}/v1/topics")[1]["topics"]


# the sender against stand-in peers ----------------------------------------------


class Peers:
    """Stand-in peers on 127.0.0.1: each answers the news route its own way."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, dict[str, Any]]] = []
        self.members: list[Member] = []
        self._runners: list[web.AppRunner] = []

    async def add(self, name: str, status: int, delay_s: float = 0.0) -> Member:
        async def news(request: web.Request) -> web.Response:
            assert request.headers.get(PEER_AUTH_HEADER)
            self.heard.append((name, msgpack.unpackb(await request.read())))
            await asyncio.sleep(delay_s)
            return web.json_response({"ok": status == 200}, status=status)

        app = web.Application()
        app.router.add_post(CATALOG_NEWS_PATH, news)
        runner = web.AppRunner(app, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runners.append(runner)
        port = runner.addresses[0][1]
        member = Member(name, f"127.0.0.1:{port}")
        self.members.append(member)
        return member

    async def close(self) -> None:
        for runner in self._runners:
            await runner.cleanup()


@pytest.fixture
async def peers() -> AsyncIterator[Peers]:
    p = Peers()
    try:
        yield p
    finally:
        await p.close()


def _sender(members: list[Member], timeout_s: float = 1.0) -> HttpCatalogNews:
    clock = SystemClock()
    view = MembershipView(Member("me", "127.0.0.1:1"))
    view.replace(members)
    signer = PeerSigner(b"k" * 32, clock.wall_ms)
    return HttpCatalogNews(signer, view, clock, timeout_s=timeout_s)


async def test_news_reaches_every_live_peer_and_tolerates_old_hung_and_gone_ones(
    peers: Peers,
) -> None:
    await peers.add("ok-1", 200)
    await peers.add("ok-2", 200)
    await peers.add("older", 404)
    await peers.add("refusing", 401)
    await peers.add("hung", 200, delay_s=30.0)
    gone = Member("gone", "127.0.0.1:9")  # nothing listens there
    sender = _sender([*peers.members, gone], timeout_s=1.0)
    await sender.start()
    try:
        t0 = time.monotonic()
        await sender.tell("queue", "q")  # never raises
        took = time.monotonic() - t0
    finally:
        await sender.stop()
    assert took < 3.0  # bounded by the timeout, peers in parallel
    assert sorted(n for n, _ in peers.heard) == ["hung", "ok-1", "ok-2", "older", "refusing"]
    assert all(body == {"kind": "queue", "name": "q"} for _, body in peers.heard)
    assert sender.delivered == 2
    assert sender.missed == 4


async def test_news_is_not_sent_before_start_or_without_peers(peers: Peers) -> None:
    await peers.add("ok", 200)
    sender = _sender(peers.members)
    await sender.tell("topic", "t")  # not started: nothing sent
    alone = _sender([])
    await alone.start()
    try:
        await alone.tell("topic", "t")
    finally:
        await alone.stop()
    assert peers.heard == []
