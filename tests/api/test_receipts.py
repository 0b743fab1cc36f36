"""Receipts on one node: a delete or visibility change by receipt acts on one delivery.

The manual clock lets a visibility timeout run out exactly, so a message is
served twice and the first delivery's receipt goes stale.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import msgpack
import pytest

from dynaq.clock import ManualClock
from dynaq.errors import StorageUnavailable
from dynaq.node import Node


async def _call(
    http: aiohttp.ClientSession, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    async with http.request(method, path, json=body) as r:
        return r.status, await r.json()


async def _receive(http: aiohttp.ClientSession, queue: str, vt: float = 5) -> list[dict[str, Any]]:
    body = {"max_messages": 10, "visibility_timeout_s": vt}
    status, out = await _call(http, "POST", f"/v2/queues/{queue}/messages/receive", body)
    assert status == 200
    return list(out["messages"])


async def _served_twice(
    http: aiohttp.ClientSession, clock: ManualClock, queue: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    assert (await _call(http, "PUT", f"/v1/queues/{queue}"))[0] == 201
    body = {"messages": [{"body": "job"}]}
    assert (await _call(http, "POST", f"/v2/queues/{queue}/messages", body))[0] == 200
    [first] = await _receive(http, queue)
    clock.advance(6)  # the first delivery's visibility runs out
    await asyncio.sleep(0.01)
    [second] = await _receive(http, queue)
    assert first["id"] == second["id"] and second["receive_count"] == 2
    assert first["receipt"] != second["receipt"]
    return first, second


async def test_a_stale_receipt_cannot_delete_or_extend_the_new_delivery(
    http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    first, second = await _served_twice(http, clock, "rc")
    path = "/v2/queues/rc/messages"
    status, out = await _call(http, "POST", f"{path}/delete", {"receipts": [first["receipt"]]})
    assert status == 200 and out["deleted"] == 0 and out["ids"] == []
    assert out["refused"] == [
        {
            "receipt": first["receipt"],
            "id": first["id"],
            "code": "stale_receipt",
            "error": "the message was received again since this receipt was handed out",
        }
    ]
    body = {"receipts": [first["receipt"]], "visibility_timeout_s": 0}
    status, out = await _call(http, "POST", f"{path}/visibility", body)
    assert status == 200 and out["changed"] == [] and len(out["refused"]) == 1
    assert await _receive(http, "rc") == []  # the second delivery is still invisible
    # the current receipt extends, then deletes
    body = {"receipts": [second["receipt"]], "visibility_timeout_s": 30}
    assert await _call(http, "POST", f"{path}/visibility", body) == (
        200,
        {"changed": [second["id"]], "refused": []},
    )
    clock.advance(10)
    await asyncio.sleep(0.01)
    assert await _receive(http, "rc") == []  # extended past the first timeout
    status, out = await _call(http, "POST", f"{path}/delete", {"receipts": [second["receipt"]]})
    assert (status, out) == (200, {"deleted": 1, "ids": [second["id"]], "refused": []})


async def test_a_receipt_deletes_a_message_nobody_received_again(
    http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    assert (await _call(http, "PUT", "/v1/queues/rx"))[0] == 201
    body = {"messages": [{"body": "a"}, {"body": "b"}]}
    assert (await _call(http, "POST", "/v2/queues/rx/messages", body))[0] == 200
    got = await _receive(http, "rx")
    clock.advance(6)  # visibility ran out, but no receive served them again
    await asyncio.sleep(0.01)
    body = {"receipts": [m["receipt"] for m in got]}
    status, out = await _call(http, "POST", "/v2/queues/rx/messages/delete", body)
    assert status == 200 and out["deleted"] == 2 and out["refused"] == []
    assert await _receive(http, "rx") == []


async def test_ids_keep_acting_on_the_current_delivery(
    http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    """Dynaq's contract: a bare id names the message, whatever delivery is current."""
    first, _ = await _served_twice(http, clock, "ri")
    body = {"ids": [first["id"]]}
    status, out = await _call(http, "POST", "/v2/queues/ri/messages/delete", body)
    assert (status, out) == (200, {"deleted": 1, "ids": [first["id"]]})


async def test_receipts_in_msgpack(http: aiohttp.ClientSession, clock: ManualClock) -> None:
    _, second = await _served_twice(http, clock, "rm")
    headers = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
    data = msgpack.packb({"receipts": [second["receipt"]]})
    async with http.post("/v2/queues/rm/messages/delete", data=data, headers=headers) as r:
        assert r.status == 200
        out = msgpack.unpackb(await r.read())
    assert out == {"deleted": 1, "ids": [int(second["id"])], "refused": []}


async def test_malformed_receipts_are_422(http: aiohttp.ClientSession) -> None:
    assert (await _call(http, "PUT", "/v1/queues/rb"))[0] == 201
    bad: dict[str, Any]
    for bad in (
        {"receipts": ["nope"]},
        {"receipts": []},
        {"receipts": "x" * 22},
        {"receipts": [12]},
        {"receipts": ["A" * 22]},  # delivery 0 never exists
        {},
    ):
        status, err = await _call(http, "POST", "/v2/queues/rb/messages/delete", bad)
        assert status == 422 and err["code"] == "invalid_input", (bad, err)


# A delete by receipt holds its messages (no receive may serve them while the write
# runs). A write that failed (the writer process restarting, a forwarded delete
# whose owner failed) left that 30 s hold in place: the messages came back 30 s
# after their visibility timeout (found by killing the writer under load).
async def _delete_failing(
    http: aiohttp.ClientSession, node: Node, monkeypatch: pytest.MonkeyPatch, queue: str
) -> tuple[dict[str, Any], int, dict[str, Any]]:
    """Receive one new message of a new ``queue`` (timeout 5 s) and delete it by receipt
    while every store write fails: the message, and the delete's status and body."""
    assert (await _call(http, "PUT", f"/v1/queues/{queue}"))[0] == 201
    body = {"messages": [{"body": "job"}]}
    assert (await _call(http, "POST", f"/v2/queues/{queue}/messages", body))[0] == 200
    [m] = await _receive(http, queue, vt=5)

    async def writer_restarting(*args: Any, **kwargs: Any) -> list[bool]:
        raise StorageUnavailable("the store's writer process is restarting")

    with monkeypatch.context() as patch:
        patch.setattr(node.store, "write_batch", writer_restarting)
        status, out = await _call(
            http, "POST", f"/v2/queues/{queue}/messages/delete", {"receipts": [m["receipt"]]}
        )
    return m, status, out


async def test_a_failed_receipt_delete_does_not_hide_the_message_past_its_timeout(
    http: aiohttp.ClientSession, clock: ManualClock, node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    m, status, out = await _delete_failing(http, node, monkeypatch, "fd")
    assert (status, out["code"]) == (503, "storage_unavailable")
    # Within its visibility timeout the delivery is still the client's: a retry works...
    assert await _receive(http, "fd") == []
    # ...and once that timeout runs out it is served again, not after a 30 s hold.
    clock.advance(6)
    await asyncio.sleep(0.01)
    [again] = await _receive(http, "fd")
    assert again["id"] == m["id"] and again["receive_count"] == 2


async def test_a_delete_retried_after_a_failed_write_still_deletes(
    http: aiohttp.ClientSession, clock: ManualClock, node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    m, status, _ = await _delete_failing(http, node, monkeypatch, "fr")
    assert status == 503
    status, out = await _call(
        http, "POST", "/v2/queues/fr/messages/delete", {"receipts": [m["receipt"]]}
    )
    assert (status, out["ids"]) == (200, [m["id"]])
    clock.advance(60)
    await asyncio.sleep(0.01)
    assert await _receive(http, "fr") == []
