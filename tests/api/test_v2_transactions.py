"""``POST /v2/transactions`` on one node: all or nothing, stale receipts refused, retries safe.

The in-process node runs on LMDB with a manual clock, so a visibility timeout
runs out exactly and a message is served twice.
"""

from __future__ import annotations

import asyncio
import io
import json
import struct
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
import pytest

from dynaq.clock import ManualClock
from dynaq.core.ids import MAX_ID
from dynaq.core.receipts import decode_receipt
from dynaq.node import Node
from tests.fixtures.nodes import node_config

TXN = "/v2/transactions"


async def _call(
    http: aiohttp.ClientSession, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    async with http.request(method, path, json=body) as r:
        return r.status, await r.json()


async def _queues(http: aiohttp.ClientSession, *names: str) -> None:
    for name in names:
        assert (await _call(http, "PUT", f"/v1/queues/{name}"))[0] == 201


async def _enqueue(http: aiohttp.ClientSession, queue: str, *bodies: str) -> list[str]:
    body = {"messages": [{"body": b} for b in bodies]}
    status, out = await _call(http, "POST", f"/v2/queues/{queue}/messages", body)
    assert status == 200
    return list(out["ids"])


async def _receive(
    http: aiohttp.ClientSession, queue: str, n: int = 10, vt: float = 5
) -> list[dict[str, Any]]:
    body = {"max_messages": n, "visibility_timeout_s": vt}
    status, out = await _call(http, "POST", f"/v2/queues/{queue}/messages/receive", body)
    assert status == 200
    return list(out["messages"])


async def _stored(http: aiohttp.ClientSession, queue: str) -> list[str]:
    """Bodies of every message of ``queue``, sorted, read without locking (a snapshot page)."""
    params = {"from_id": "0", "to_id": str(MAX_ID), "limit": "1000"}
    headers = {"Accept": "application/msgpack"}
    async with http.get(f"/v2/queues/{queue}/snapshot", params=params, headers=headers) as r:
        assert r.status == 200, await r.text()
        page = msgpack.unpackb(await r.read())
    n = page["count"]
    offsets = struct.unpack(f"<{n + 1}i", page["body_offsets"][: 4 * (n + 1)])
    bodies: bytes = page["bodies"]
    return sorted(bodies[offsets[i] : offsets[i + 1]].decode() for i in range(n))


async def test_a_transaction_deletes_its_inputs_and_enqueues_its_outputs(
    http: aiohttp.ClientSession,
) -> None:
    await _queues(http, "in", "out", "audit")
    await _enqueue(http, "in", "a", "b", "c")
    got = await _receive(http, "in", n=2)
    assert len(got) == 2
    body = {
        "delete": [{"queue": "in", "receipt": m["receipt"]} for m in got],
        "enqueue": [
            {"queue": "out", "body": "A", "dedup_id": "h1"},
            {"queue": "audit", "body": "seen", "attributes": {"k": "v"}},
            {"queue": "out", "body": "B", "group": "g"},
        ],
    }
    status, out = await _call(http, "POST", TXN, body)
    assert status == 200, out
    assert out["deleted"] == 2
    assert [e["queue"] for e in out["enqueued"]] == ["out", "audit", "out"]
    assert all(isinstance(e["id"], str) and "duplicate" not in e for e in out["enqueued"])
    assert await _stored(http, "in") == ["c"]
    assert await _stored(http, "out") == ["A", "B"]
    [audit] = await _receive(http, "audit")
    assert audit["body"] == "seen" and audit["attributes"] == {"k": "v"}
    assert audit["id"] == out["enqueued"][1]["id"]
    # depth follows the transaction (the node counts what passed through it)
    status, info = await _call(http, "GET", "/v2/queues/out")
    assert info["depth"] == 2
    status, info = await _call(http, "GET", "/v2/queues/in")
    assert info["depth"] == 1


async def test_a_stale_receipt_refuses_the_whole_transaction(
    http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    await _queues(http, "in", "out")
    await _enqueue(http, "in", "keep", "again")
    got = await _receive(http, "in", vt=5)
    by_body = {m["body"]: m for m in got}
    # "again" is served a second time: the receipt of its first delivery goes stale
    status, _ = await _call(
        http,
        "POST",
        "/v2/queues/in/messages/visibility",
        {"receipts": [by_body["again"]["receipt"]], "visibility_timeout_s": 0},
    )
    assert status == 200
    [again2] = await _receive(http, "in", vt=5)
    assert again2["body"] == "again" and again2["receipt"] != by_body["again"]["receipt"]
    body = {
        "delete": [
            {"queue": "in", "receipt": by_body["keep"]["receipt"]},
            {"queue": "in", "receipt": by_body["again"]["receipt"]},
        ],
        "enqueue": [{"queue": "out", "body": "never", "dedup_id": "x1"}],
    }
    status, out = await _call(http, "POST", TXN, body)
    assert status == 409
    assert out["code"] == "stale_receipt" and out["error"]
    assert out["receipts"] == [by_body["again"]["receipt"]]
    # nothing applied: the current input is still stored, no output, no dedup record
    assert await _stored(http, "in") == ["again", "keep"]
    assert await _stored(http, "out") == []
    status, out = await _call(
        http, "POST", TXN, {"enqueue": [{"queue": "out", "body": "now", "dedup_id": "x1"}]}
    )
    assert status == 200 and "duplicate" not in out["enqueued"][0]
    # a receipt whose visibility ran out (nobody received it since) is not current either
    clock.advance(31)
    await asyncio.sleep(0.01)
    body = {
        "delete": [{"queue": "in", "receipt": again2["receipt"]}],
        "enqueue": [{"queue": "out", "body": "late"}],
    }
    status, out = await _call(http, "POST", TXN, body)
    assert (status, out["receipts"]) == (409, [again2["receipt"]])
    assert await _stored(http, "out") == ["now"]


async def test_a_deleted_input_is_refused_and_a_retry_is_answered_as_a_replay(
    http: aiohttp.ClientSession,
) -> None:
    await _queues(http, "in", "out")
    await _enqueue(http, "in", "job")
    [m] = await _receive(http, "in")
    txn = {
        "delete": [{"queue": "in", "receipt": m["receipt"]}],
        "enqueue": [
            {"queue": "out", "body": "r1", "dedup_id": "7f3a:0"},
            {"queue": "out", "body": "r2", "dedup_id": "7f3a:1"},
        ],
    }
    status, first = await _call(http, "POST", TXN, txn)
    assert status == 200 and first["deleted"] == 1
    # the answer was lost; the processor sends the same transaction again
    status, again = await _call(http, "POST", TXN, txn)
    assert status == 200, again
    assert again["replayed"] is True and again["deleted"] == 0
    assert [(e["id"], e.get("duplicate")) for e in again["enqueued"]] == [
        (e["id"], True) for e in first["enqueued"]
    ]
    assert await _stored(http, "out") == ["r1", "r2"]
    # the same input with an output not stored yet: the input is gone, so 409
    txn["enqueue"] = [{"queue": "out", "body": "r3", "dedup_id": "7f3a:2"}]
    status, out = await _call(http, "POST", TXN, txn)
    assert (status, out["code"]) == (409, "stale_receipt")
    assert await _stored(http, "out") == ["r1", "r2"]
    # and an output without a dedup id never makes a retry a replay
    txn["enqueue"] = [
        {"queue": "out", "body": "r1", "dedup_id": "7f3a:0"},
        {"queue": "out", "body": "plain"},
    ]
    status, out = await _call(http, "POST", TXN, txn)
    assert status == 409
    assert await _stored(http, "out") == ["r1", "r2"]


async def test_msgpack_transactions_use_integer_ids(http: aiohttp.ClientSession) -> None:
    await _queues(http, "in", "out")
    await _enqueue(http, "in", "job")
    [m] = await _receive(http, "in")
    body = msgpack.packb(
        {
            "delete": [{"queue": "in", "receipt": m["receipt"]}],
            "enqueue": [{"queue": "out", "body": b"\x00\xffraw"}],
        }
    )
    headers = {"Content-Type": "application/msgpack"}
    async with http.post(TXN, data=body, headers=headers) as r:
        assert r.status == 200 and r.content_type == "application/msgpack"
        out = msgpack.unpackb(await r.read())
    assert out["deleted"] == 1 and isinstance(out["enqueued"][0]["id"], int)
    [got] = await _receive(http, "out")
    assert got["id"] == str(out["enqueued"][0]["id"])


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({}, 422, "invalid_input"),
        ({"delete": [], "enqueue": []}, 422, "invalid_input"),
        ({"delete": {}}, 422, "invalid_input"),
        ({"enqueue": [{"queue": "out"}]}, 422, "invalid_input"),
        ({"enqueue": [{"queue": "out", "body": 1}]}, 422, "invalid_input"),
        ({"enqueue": [{"body": "x"}]}, 422, "invalid_input"),
        ({"enqueue": [{"queue": "nope", "body": "x"}]}, 404, "queue_not_found"),
        ({"enqueue": [{"queue": "../x", "body": "x"}]}, 422, "invalid_name"),
        ({"delete": [{"queue": "a b", "receipt": "r"}]}, 422, "invalid_name"),
        ({"delete": [{"queue": "out", "receipt": "short"}]}, 422, "invalid_input"),
        ({"delete": [{"queue": "out"}]}, 422, "invalid_input"),
        (
            {"delete": [{"queue": "nope", "receipt": "AAAAAAAAAAAAAAAAAAAAAQ"}]},
            404,
            "queue_not_found",
        ),
        ({"delete": [{"queue": "out", "receipt": "AAAAAAAAAAAAAAAAAAAAAQ", "x": 1}]}, 422, None),
        ({"enqueue": [{"queue": "out", "body": "x"}], "ids": [1]}, 422, "invalid_input"),
        ({"enqueue": [{"queue": "out", "body": "x", "dedup_id": ""}]}, 422, "invalid_input"),
        ({"enqueue": [{"queue": "out", "body": "x", "group": "g", "delay_s": 1}]}, 422, None),
        ({"enqueue": [{"queue": "out", "body": "x"}] * 1001}, 422, "invalid_input"),
        (
            {
                "delete": [{"queue": "out", "receipt": "AAAAAAAAAAAAAAAAAAAAAQ"}] * 600,
                "enqueue": [{"queue": "out", "body": "x"}] * 401,
            },
            422,
            "invalid_input",
        ),
        ([1], 422, "invalid_input"),
    ],
)
async def test_bad_transactions_get_a_precise_4xx_and_apply_nothing(
    http: aiohttp.ClientSession, body: Any, status: int, code: str | None
) -> None:
    await _queues(http, "out")
    got, out = await _call(http, "POST", TXN, body)
    assert got == status, out
    assert out["error"] and (code is None or out["code"] == code)
    assert await _stored(http, "out") == []


async def test_a_receipt_named_twice_and_an_unknown_receipt_are_refused(
    http: aiohttp.ClientSession,
) -> None:
    await _queues(http, "in", "out")
    await _enqueue(http, "in", "job")
    [m] = await _receive(http, "in")
    twice = {"delete": [{"queue": "in", "receipt": m["receipt"]}] * 2}
    status, out = await _call(http, "POST", TXN, twice)
    assert (status, out["code"]) == (422, "invalid_input")
    # a well-formed receipt no delivery handed out
    unknown = "AAAAAAAAAAAAAAAAAAAAAQ"
    body = {
        "delete": [{"queue": "in", "receipt": m["receipt"]}, {"queue": "in", "receipt": unknown}],
        "enqueue": [{"queue": "out", "body": "x"}],
    }
    status, out = await _call(http, "POST", TXN, body)
    assert (status, out["receipts"]) == (409, [unknown])
    assert await _stored(http, "in") == ["job"]
    assert await _stored(http, "out") == []


async def test_an_output_over_the_size_limit_refuses_before_anything_is_held(
    node: Node, http: aiohttp.ClientSession
) -> None:
    await _queues(http, "in", "out")
    await _enqueue(http, "in", "job")
    [m] = await _receive(http, "in")
    big = "x" * (node.queues.limits.max_message_bytes + 1)
    body: dict[str, Any] = {
        "delete": [{"queue": "in", "receipt": m["receipt"]}],
        "enqueue": [{"queue": "out", "body": "ok"}, {"queue": "out", "body": big}],
    }
    status, out = await _call(http, "POST", TXN, body)
    assert (status, out["code"]) == (413, "payload_too_large")
    assert await _stored(http, "in") == ["job"]
    assert await _stored(http, "out") == []
    # the refusal came before any hold: the receipt is still current, and a delayed
    # output commits with it
    body["enqueue"] = [{"queue": "out", "body": "later", "delay_s": 60}]
    status, out = await _call(http, "POST", TXN, body)
    assert status == 200 and out["deleted"] == 1
    assert await _stored(http, "in") == []
    assert await _stored(http, "out") == []  # not due yet: stored under its due time
    assert await node.queues.depth(await node.catalog.queue("in")) == 0


async def test_a_refused_transaction_releases_its_claims(
    http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    """Its current inputs keep their own visibility (not the transaction's 30 s hold), and
    a corrected transaction commits them at once."""
    await _queues(http, "in", "out")
    await _enqueue(http, "in", "a", "b")
    got = {m["body"]: m for m in await _receive(http, "in", vt=5)}
    await _call(
        http,
        "POST",
        "/v2/queues/in/messages/visibility",
        {"receipts": [got["b"]["receipt"]], "visibility_timeout_s": 0},
    )
    [b2] = await _receive(http, "in", vt=5)
    both = {
        "delete": [{"queue": "in", "receipt": m["receipt"]} for m in got.values()],
        "enqueue": [{"queue": "out", "body": "ab"}],
    }
    status, out = await _call(http, "POST", TXN, both)
    assert (status, out["receipts"]) == (409, [got["b"]["receipt"]])
    assert await _receive(http, "in") == []  # a is still held, b in flight
    fixed = {
        "delete": [
            {"queue": "in", "receipt": got["a"]["receipt"]},
            {"queue": "in", "receipt": b2["receipt"]},
        ],
        "enqueue": [{"queue": "out", "body": "ab"}],
    }
    status, out = await _call(http, "POST", TXN, fixed)
    assert status == 200 and out["deleted"] == 2
    assert await _stored(http, "in") == []
    assert await _stored(http, "out") == ["ab"]
    # c is claimed (its queue's receipts check out), then the transaction is refused
    # for another queue's receipt: c is visible once its own 5 s run out, not after 30 s
    await _queues(http, "other")
    await _enqueue(http, "in", "c")
    [c] = await _receive(http, "in", vt=5)
    body = {
        "delete": [
            {"queue": "in", "receipt": c["receipt"]},
            {"queue": "other", "receipt": "AAAAAAAAAAAAAAAAAAAAAQ"},
        ]
    }
    assert (await _call(http, "POST", TXN, body))[0] == 409
    clock.advance(6)
    await asyncio.sleep(0.01)
    [again] = await _receive(http, "in")
    assert again["body"] == "c" and again["receive_count"] == 2


async def test_the_same_transaction_twice_at_once_commits_once(
    http: aiohttp.ClientSession,
) -> None:
    """No dedup ids: only the receipt's claim keeps the second copy from committing."""
    await _queues(http, "in", "out")
    await _enqueue(http, "in", *[f"m{i}" for i in range(20)])
    got = await _receive(http, "in", n=20)
    bodies = []
    for m in got:
        txn = {
            "delete": [{"queue": "in", "receipt": m["receipt"]}],
            "enqueue": [{"queue": "out", "body": f"from {m['body']}"}],
        }
        answers = await asyncio.gather(*(_call(http, "POST", TXN, txn) for _ in range(3)))
        assert sorted(status for status, _ in answers) == [200, 409, 409], answers
        bodies.append(f"from {m['body']}")
    assert await _stored(http, "in") == []
    assert await _stored(http, "out") == sorted(bodies)


async def test_receipts_another_transaction_claimed_are_in_use_until_released(
    node: Node, http: aiohttp.ClientSession
) -> None:
    """A transaction still committing (here: claims taken directly) makes a second one
    with its receipts a retriable 409 receipts_in_use, not stale_receipt: the first
    one's outcome decides whether the inputs go."""
    await _queues(http, "in", "out")
    await _enqueue(http, "in", "job")
    [m] = await _receive(http, "in")
    info = await node.catalog.queue("in")
    mid, delivery = decode_receipt(m["receipt"])
    stale, busy, claimed = await node.queues.receipts.hold([(info, mid, delivery)])
    assert (stale, busy, len(claimed)) == (set(), set(), 1)
    txn = {
        "delete": [{"queue": "in", "receipt": m["receipt"]}],
        "enqueue": [{"queue": "out", "body": "r", "dedup_id": "h"}],
    }
    status, out = await _call(http, "POST", TXN, txn)
    assert (status, out["code"], out["receipts"]) == (409, "receipts_in_use", [m["receipt"]])
    assert await _stored(http, "out") == []
    await node.queues.receipts.release(claimed)
    status, out = await _call(http, "POST", TXN, txn)
    assert status == 200 and out["deleted"] == 1


async def test_a_failed_write_keeps_its_claims_so_a_retry_cannot_commit_twice(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The store refuses the write (full: 507). The outcome of a failed write is unknown
    in general, so the inputs stay claimed: a retry is told receipts_in_use, nothing is
    applied, and once the hold runs out the input is served again."""
    config = node_config(tmp_path, embedded={"map_size_mb": 2})
    node = Node(config, clock=clock)
    await node.start()
    try:
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{node.port}") as http:
            await _queues(http, "in", "out")
            await _enqueue(http, "in", "job")
            [m] = await _receive(http, "in", vt=5)
            big = "x" * 200_000
            txn = {
                "delete": [{"queue": "in", "receipt": m["receipt"]}],
                "enqueue": [{"queue": "out", "body": big, "dedup_id": f"o{i}"} for i in range(15)],
            }
            raw = json.dumps(txn).encode()

            async def send() -> tuple[int, Any]:
                headers = {"Content-Type": "application/json"}
                async with http.post(TXN, data=io.BytesIO(raw), headers=headers) as r:
                    return r.status, await r.json()

            status, out = await send()
            assert (status, out["code"]) == (507, "insufficient_storage"), out
            status, out = await send()
            assert (status, out["code"]) == (409, "receipts_in_use")
            assert await _stored(http, "in") == ["job"]
            assert await _stored(http, "out") == []
            clock.advance(31)
            await asyncio.sleep(0.01)
            [again] = await _receive(http, "in")
            assert again["body"] == "job" and again["receive_count"] == 2
    finally:
        await node.stop()
