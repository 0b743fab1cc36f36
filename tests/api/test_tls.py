"""HTTPS: a node serves its API over TLS from http.tls_cert/tls_key, and peers reach it over TLS.

Certificates are made by the session's ``tls_cert`` fixture (self-signed, for
127.0.0.1 and localhost); clients verify against it, hostname included.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import kinship
import pytest

from dynaq.client import Client
from dynaq.clock import SystemClock
from dynaq.cluster.hints import HttpPeerHints
from dynaq.cluster.leave_handover import hand_over
from dynaq.cluster.swim import SwimSettings, kinship_config, live_members
from dynaq.config import config_from_mapping
from dynaq.core.ids import IdGenerator, group_lane
from dynaq.core.messages import NewMessage
from dynaq.core.peer_auth import PeerSigner, derive_peer_key
from dynaq.errors import ClientError, InvalidInput, Unauthorized
from dynaq.node import Node
from dynaq.storage.memory import MemoryStore
from tests.fixtures.nodes import node_config
from tests.fixtures.tls import SelfSigned

SECRET = "tls-ring-secret"
TOKEN = "tls-admin-token-0123456789"


def _tls(cert: SelfSigned, **sections: dict[str, Any]) -> dict[str, Any]:
    http = {"tls_cert": str(cert.cert), "tls_key": str(cert.key), "tls_ca": str(cert.cert)}
    return {"http": http, **sections}


@pytest.fixture
async def node(tmp_path: Path, tls_cert: SelfSigned) -> AsyncIterator[Node]:
    auth = {"tokens": [f"ops:{TOKEN}:admin=*"]}
    n = Node(node_config(tmp_path, **_tls(tls_cert, auth=auth)))
    await n.start()
    try:
        yield n
    finally:
        await n.stop()


async def test_the_api_is_served_over_https_only(node: Node, tls_cert: SelfSigned) -> None:
    assert node.view.me.scheme == "https"
    ctx = tls_cert.client_context()
    async with aiohttp.ClientSession() as s:
        for host in ("127.0.0.1", "localhost"):  # both names are in the certificate
            async with s.get(f"https://{host}:{node.port}/health", ssl=ctx) as r:
                assert r.status == 200
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with s.put(
            f"https://127.0.0.1:{node.port}/v1/queues/q", headers=headers, ssl=ctx
        ) as r:
            assert r.status == 201
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await s.get(f"https://127.0.0.1:{node.port}/health")  # not trusted by default
        with pytest.raises(aiohttp.ClientError):
            await s.get(f"http://127.0.0.1:{node.port}/health")  # plain HTTP is not served


async def test_the_sync_client_speaks_https_with_a_token(node: Node, tls_cert: SelfSigned) -> None:
    def round_trip() -> list[bytes]:
        url = f"https://127.0.0.1:{node.port}"
        with Client(url, token=TOKEN, ca_file=str(tls_cert.cert)) as c:
            assert TOKEN not in repr(c)
            c.create_queue("jobs")
            c.enqueue("jobs", [{"body": b"over tls"}])
            got = c.receive("jobs", 10)
            assert c.delete("jobs", [m.id for m in got]) == 1
            bodies = [m.body for m in got]
        with Client(url, ca_file=str(tls_cert.cert)) as anonymous:
            with pytest.raises(Unauthorized) as err:
                anonymous.receive("jobs")
            assert err.value.status == 401 and err.value.code == "unauthorized"
        with Client(url, token=TOKEN) as untrusting, pytest.raises(ClientError):
            untrusting.ring()  # the system's CAs do not know this certificate
        return bodies

    assert await asyncio.to_thread(round_trip) == [b"over tls"]


def test_tls_needs_both_files_and_loadable_ones(tmp_path: Path, tls_cert: SelfSigned) -> None:
    with pytest.raises(InvalidInput, match="go together"):
        config_from_mapping({"http": {"tls_cert": str(tls_cert.cert)}})
    missing = {"tls_cert": str(tmp_path / "nope.crt"), "tls_key": str(tls_cert.key)}
    with pytest.raises(InvalidInput, match="cannot be loaded"):
        Node(node_config(tmp_path, http=missing))
    swapped = {"tls_cert": str(tls_cert.key), "tls_key": str(tls_cert.cert)}
    with pytest.raises(InvalidInput, match="cannot be loaded"):
        Node(node_config(tmp_path, http=swapped))


def test_the_scheme_travels_in_gossip_metadata() -> None:
    settings = SwimSettings(bind="127.0.0.1:7001", secret="s")
    assert kinship_config("a", "h:1", settings).meta == {"http": "h:1"}  # as older nodes send
    assert kinship_config("a", "h:1", settings, "https").meta == {"http": "h:1", "scheme": "https"}


def test_members_are_read_with_their_scheme() -> None:
    def member(name: str, meta: dict[str, str]) -> Any:
        return SimpleNamespace(name=name, meta=meta, state=kinship.State.ALIVE)

    fakes = [
        member("a", {"http": "h:1"}),
        member("b", {"http": "h:2", "scheme": "https"}),
        member("c", {"http": "h:3", "scheme": "gopher"}),  # not https: the default
    ]
    assert [(m.name, m.base_url) for m in live_members(fakes)] == [
        ("a", "http://h:1"),
        ("b", "https://h:2"),
        ("c", "http://h:3"),
    ]


async def test_hints_and_the_handover_reach_tls_peers(tmp_path: Path, tls_cert: SelfSigned) -> None:
    """Two HTTPS nodes on one store: a delete through one unblocks a group on the other
    at once (a signed hint over TLS), and a leaving node's in-flight messages are
    handed over TLS."""
    store = MemoryStore()
    gossip = {"key": SECRET}
    a = Node(
        node_config(tmp_path / "a", **_tls(tls_cert, node={"name": "a"}, gossip=gossip)),
        store=store,
    )
    b = Node(
        node_config(tmp_path / "b", **_tls(tls_cert, node={"name": "b"}, gossip=gossip)),
        store=store,
    )
    b.queues.set_ids(IdGenerator(SystemClock(), writer=1))
    signer = PeerSigner(derive_peer_key(SECRET), SystemClock().wall_ms)
    trust = tls_cert.client_context()
    hints: list[HttpPeerHints] = []
    try:
        for n in (a, b):
            await n.start()
            h = HttpPeerHints(signer, trust)
            await h.start()
            n.queues.set_peer_hints(h)
            hints.append(h)
        for n in (a, b):
            n.view.replace([a.view.me, b.view.me])
        await a.catalog.create_queue("q")
        group = next(f"g{i}" for i in range(1000) if group_lane(f"g{i}") in b.view.my_slice)
        await a.queues.enqueue("q", [NewMessage(b"%d" % i, group=group) for i in range(2)])
        first = await b.queues.receive("q", 10)
        assert [m.body for m in first] == [b"0"]
        await a.queues.delete("q", [first[0].id])  # hinted to b over https
        for _ in range(200):
            nxt = await b.queues.receive("q", 10, visibility_timeout_s=60)
            if nxt:
                break
            await asyncio.sleep(0.01)
        assert [m.body for m in nxt] == [b"1"]
        # b acts on the hint before a has read b's answer (one event loop runs both):
        # the count moves a moment after the group does.
        for _ in range(200):
            if hints[0].sent:
                break
            await asyncio.sleep(0.01)
        assert hints[0].sent >= 1 and hints[0].refused == 0
        # b leaves: its in-flight message goes to a over TLS, signed
        assert await hand_over(b.queues.hints.handover(), signer, trust) == 1
        # a peer that does not trust the certificate gets nowhere
        assert await hand_over(b.queues.hints.handover(), signer, ssl.create_default_context()) == 0
    finally:
        for h in hints:
            await h.stop()
        for n in (a, b):
            await n.stop()
