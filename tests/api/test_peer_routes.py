"""/internal/ over HTTP: only requests a ring member signed for this node, once, in time.

Nodes here run on a manual clock, so "30 s later" is one call, not a sleep.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import msgpack
import pytest

from dynaq.clock import ManualClock
from dynaq.cluster.hints import post_signed
from dynaq.core.hints import HINTS_PATH, RECEIPT_HOLD_PATH, HintsMessage, encode_hints
from dynaq.core.peer_auth import PEER_AUTH_HEADER, PeerSigner, derive_peer_key
from dynaq.core.stream_copies import (
    DECLARED_PATH,
    FOLLOW_PATH,
    HISTORY_PATH,
    REPORT_PATH,
    SIZE_PATH,
)
from dynaq.node import Node
from tests.fixtures.nodes import node_config

SECRET = "peer-routes-secret"
BODY = encode_hints(HintsMessage())
ADMIN = "admin-token-0123456789"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


async def _running(node: Node) -> AsyncIterator[Node]:
    await node.start()
    try:
        yield node
    finally:
        await node.stop()


@pytest.fixture
async def node(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Node]:
    config = node_config(
        tmp_path, gossip={"key": SECRET}, auth={"tokens": [f"ops:{ADMIN}:admin=*"]}
    )
    async for n in _running(Node(config, clock=clock)):
        yield n


@pytest.fixture
def signer(clock: ManualClock) -> PeerSigner:
    return PeerSigner(derive_peer_key(SECRET), clock.wall_ms)


async def _post(
    node: Node, headers: dict[str, str], body: bytes = BODY
) -> tuple[int, dict[str, str]]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"http://127.0.0.1:{node.port}{HINTS_PATH}", data=body, headers=headers) as r,
    ):
        return r.status, {
            "code": (await r.json())["code"] if r.status != 200 else "ok",
            **r.headers,
        }


async def test_a_signed_hint_is_taken_once(node: Node, signer: PeerSigner) -> None:
    header = {PEER_AUTH_HEADER: signer.header("POST", node.view.me.http_addr, HINTS_PATH, BODY)}
    status, _ = await _post(node, header)
    assert status == 200
    status, info = await _post(node, header)  # the same request again: a replay
    assert status == 401 and info["code"] == "unauthorized"
    assert info["WWW-Authenticate"].startswith("DynaqPeer")


async def test_unsigned_forged_and_misaddressed_requests_are_401(
    node: Node, signer: PeerSigner, clock: ManualClock
) -> None:
    me = node.view.me.http_addr
    other_key = PeerSigner(derive_peer_key("not-the-secret"), clock.wall_ms)
    cases = [
        ({}, BODY),  # unsigned
        ({PEER_AUTH_HEADER: signer.header("POST", me, HINTS_PATH, b"other body")}, BODY),
        ({PEER_AUTH_HEADER: signer.header("POST", "10.9.9.9:8081", HINTS_PATH, BODY)}, BODY),
        ({PEER_AUTH_HEADER: other_key.header("POST", me, HINTS_PATH, BODY)}, BODY),
        ({"Authorization": f"Bearer {ADMIN}"}, BODY),  # a client token is no peer credential
    ]
    for headers, body in cases:
        status, info = await _post(node, headers, body)
        assert status == 401 and info["code"] == "unauthorized", headers


async def test_an_expired_signature_is_401(
    node: Node, signer: PeerSigner, clock: ManualClock
) -> None:
    header = {PEER_AUTH_HEADER: signer.header("POST", node.view.me.http_addr, HINTS_PATH, BODY)}
    clock.advance(31)  # the request arrives 31 s after it was signed
    status, _ = await _post(node, header)
    assert status == 401


async def test_a_sender_whose_clock_is_an_hour_off_gets_its_hints_in(
    node: Node, clock: ManualClock
) -> None:
    """The first POST is refused as stale; its challenge carries the node's time,
    and :func:`post_signed` re-signs with it and is taken: hints keep flowing
    between nodes whose clocks were stepped apart."""
    behind = PeerSigner(derive_peer_key(SECRET), lambda: clock.wall_ms() - 3_600_000)
    async with aiohttp.ClientSession() as s:
        assert await post_signed(s, behind, node.view.me, BODY, None) == 200
        assert abs(behind.offset_ms(node.view.me.http_addr) - 3_600_000) < 1_000
        assert await post_signed(s, behind, node.view.me, BODY, None) == 200


async def test_a_node_without_a_secret_refuses_every_peer_request(
    tmp_path: Path, signer: PeerSigner
) -> None:
    async for node in _running(Node(node_config(tmp_path))):
        header = signer.header("POST", node.view.me.http_addr, HINTS_PATH, BODY)
        status, _ = await _post(node, {PEER_AUTH_HEADER: header})
        assert status == 401


async def test_malformed_stream_copy_requests_get_a_precise_4xx(
    node: Node, signer: PeerSigner
) -> None:
    """The node-to-node routes of stream copies, signed but malformed: 422 (or 404 for a
    stream that is not here) with the JSON error body, never a 5xx."""
    me = node.view.me.http_addr
    cases: list[tuple[str, object, int]] = [
        (FOLLOW_PATH, {"stream": "s", "start": -1}, 422),
        (FOLLOW_PATH, {"stream": "s", "start": "x"}, 422),
        (FOLLOW_PATH, {"stream": "nope", "start": 0}, 404),
        (FOLLOW_PATH, [1, 2], 422),
        (DECLARED_PATH, {"stream": "nope"}, 404),
        (DECLARED_PATH, {}, 422),
        (REPORT_PATH, {"stream": "s", "node": "n", "size": -3}, 422),
        (REPORT_PATH, {"stream": "s", "node": "n"}, 422),
        (HISTORY_PATH, {"stream": "topic.t", "entries": [1]}, 422),
        (HISTORY_PATH, {"stream": "topic.t", "entries": [{"body": 1}]}, 422),
    ]
    async with aiohttp.ClientSession() as s:
        for path, message, want in cases:
            body = bytes(msgpack.packb(message))
            headers = {
                PEER_AUTH_HEADER: signer.header("POST", me, path, body),
                "Content-Type": "application/msgpack",
            }
            async with s.post(
                f"http://127.0.0.1:{node.port}{path}", data=body, headers=headers
            ) as r:
                answer = await r.json()
                assert r.status == want and answer["code"], (path, message, r.status, answer)
        body = b"\xc1 not msgpack"
        headers = {PEER_AUTH_HEADER: signer.header("POST", me, SIZE_PATH, body)}
        async with s.post(
            f"http://127.0.0.1:{node.port}{SIZE_PATH}", data=body, headers=headers
        ) as r:
            assert r.status == 422 and (await r.json())["code"] == "invalid_input"


async def test_malformed_receipt_holds_get_a_precise_4xx(node: Node, signer: PeerSigner) -> None:
    """The transactions' receipt-hold route, signed but malformed: 422 (404 for a queue that
    is not here); a well-formed hold of a delivery this node never served is stale."""
    me = node.view.me.http_addr
    await node.catalog.create_queue("q")
    cases: list[tuple[object, int]] = [
        ({"queue": "q", "ids": [1]}, 422),  # deliveries missing
        ({"queue": "q", "ids": [1], "deliveries": [1, 2]}, 422),
        ({"queue": "q", "ids": ["x"], "deliveries": [1]}, 422),
        ({"queue": "q", "ids": [1], "deliveries": [1], "release": "yes"}, 422),
        ({"queue": "nope", "ids": [1], "deliveries": [1]}, 404),
        ([1, 2], 422),
        ({"queue": "q", "ids": [1], "deliveries": [1]}, 200),
        ({"queue": "q", "ids": [1], "deliveries": [1], "release": True}, 200),
    ]
    async with aiohttp.ClientSession() as s:
        for message, want in cases:
            body = bytes(msgpack.packb(message))
            headers = {
                PEER_AUTH_HEADER: signer.header("POST", me, RECEIPT_HOLD_PATH, body),
                "Content-Type": "application/msgpack",
            }
            url = f"http://127.0.0.1:{node.port}{RECEIPT_HOLD_PATH}"
            async with s.post(url, data=body, headers=headers) as r:
                raw = await r.read()
                assert r.status == want, (message, r.status, raw)
                if want == 200:
                    answer = msgpack.unpackb(raw)
                    release = isinstance(message, dict) and message.get("release")
                    assert answer == {"stale": [] if release else [1], "busy": []}
                else:
                    assert (await r.json())["code"]
