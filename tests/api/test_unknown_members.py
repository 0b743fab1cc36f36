"""Unknown members of v2 request bodies are refused (422 naming them), never ignored.

A misspelled member (``dedupe_id``, ``delay``, v1's ``visibility_timeout``)
used to be dropped silently: the request then ran without it (no idempotency,
no delay, the default visibility). Each body shape, in JSON and msgpack, is
refused before anything is written or locked; every legitimate member is
still accepted.
"""

from __future__ import annotations

import base64
from typing import Any

import aiohttp
import msgpack
import pytest

MP = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}
TXN = "/v2/transactions"


async def _call(
    http: aiohttp.ClientSession, path: str, body: Any, binary: bool = False
) -> tuple[int, Any]:
    """POST ``body`` as JSON or msgpack; (status, decoded answer). Errors are JSON."""
    if binary:
        req = http.post(path, data=msgpack.packb(body, use_bin_type=True), headers=MP)
    else:
        req = http.post(path, json=body)
    async with req as r:
        raw = await r.read()
        if r.content_type == "application/msgpack":
            return r.status, msgpack.unpackb(raw)
        return r.status, await r.json()


async def _queue(http: aiohttp.ClientSession, name: str) -> None:
    async with http.put(f"/v1/queues/{name}") as r:
        assert r.status == 201


async def _counts(http: aiohttp.ClientSession, name: str) -> tuple[int, int]:
    """(depth, in_flight) of ``name`` (exact on one node)."""
    async with http.get(f"/v2/queues/{name}") as r:
        d = await r.json()
    return d["depth"], d["in_flight"]


async def _enqueue(http: aiohttp.ClientSession, name: str, *bodies: str) -> list[str]:
    status, out = await _call(
        http, f"/v2/queues/{name}/messages", {"messages": [{"body": b} for b in bodies]}
    )
    assert status == 200, out
    return list(out["ids"])


async def _receive(http: aiohttp.ClientSession, name: str, vt: float = 30) -> list[dict[str, Any]]:
    body = {"max_messages": 10, "visibility_timeout_s": vt}
    status, out = await _call(http, f"/v2/queues/{name}/messages/receive", body)
    assert status == 200, out
    return list(out["messages"])


def _refused(status: int, out: Any, *parts: str) -> None:
    assert status == 422, out
    assert out["code"] == "invalid_input", out
    for part in parts:
        assert part in out["error"], out


def _b(text: str, binary: bool) -> str | bytes:
    return text.encode() if binary else text


# enqueue and publish ----------------------------------------------------------

ENQUEUE_CASES: list[tuple[str, Any, tuple[str, ...]]] = [
    (
        "dedupe_id",
        lambda b: {"messages": [{"body": b("a"), "dedupe_id": "k1"}]},
        ("messages[0]: unknown member 'dedupe_id'", "(did you mean 'dedup_id'?)"),
    ),
    (
        "delay",
        lambda b: {
            "messages": [
                {"body": b("a"), "dedup_id": "k1"},
                {"body": b("a"), "dedup_id": "k1"},
                {"body": b("b"), "delay": 600},
            ]
        },
        ("messages[2]: unknown member 'delay'", "(did you mean 'delay_s'?)"),
    ),
    (
        "attribute",
        lambda b: {"messages": [{"body": b("a"), "attribute": {"k": "v"}}]},
        ("messages[0]: unknown member 'attribute'", "(did you mean 'attributes'?)"),
    ),
    (
        "bdy",  # a one-member item that is not {"body": ...} (msgpack's fast path)
        lambda b: {"messages": [{"body": b("a")}, {"bdy": b("a")}]},
        ("messages[1]: unknown member 'bdy'", "(did you mean 'body'?)"),
    ),
    (
        "top level",
        lambda b: {"messages": [{"body": b("a")}], "delay_s": 5},
        ("unknown member 'delay_s'", "expected messages"),
    ),
    (
        "top level typo",
        lambda b: {"messages": [{"body": b("a")}], "message": [{"body": b("b")}]},
        ("unknown member 'message'", "(did you mean 'messages'?)"),
    ),
]


@pytest.mark.parametrize("binary", [False, True], ids=["json", "msgpack"])
@pytest.mark.parametrize(
    ("label", "make", "parts"), ENQUEUE_CASES, ids=[c[0] for c in ENQUEUE_CASES]
)
async def test_an_enqueue_with_an_unknown_member_is_refused_and_stores_nothing(
    http: aiohttp.ClientSession, binary: bool, label: str, make: Any, parts: tuple[str, ...]
) -> None:
    await _queue(http, "typo")
    body = make(lambda t: _b(t, binary))
    status, out = await _call(http, "/v2/queues/typo/messages", body, binary)
    _refused(status, out, *parts)
    assert await _counts(http, "typo") == (0, 0)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "msgpack"])
async def test_a_non_string_member_name_is_refused(
    http: aiohttp.ClientSession, binary: bool
) -> None:
    await _queue(http, "typo")
    if binary:  # only msgpack can carry an integer key
        body: Any = {"messages": [{"body": b"a", 7: "x"}]}
        parts: tuple[str, ...] = ("messages[0]: unknown member '7'",)
    else:
        body = {"messages": [{"body": "a", "": "x"}]}
        parts = ("messages[0]: unknown member ''",)
    status, out = await _call(http, "/v2/queues/typo/messages", body, binary)
    _refused(status, out, *parts)
    assert await _counts(http, "typo") == (0, 0)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "msgpack"])
async def test_a_publish_with_an_unknown_member_is_refused_and_delivers_nothing(
    http: aiohttp.ClientSession, binary: bool
) -> None:
    await _queue(http, "sub")
    async with http.put("/v1/topics/t") as r:
        assert r.status < 300
    async with http.put("/v1/topics/t/queues/sub") as r:
        assert r.status < 300
    body: dict[str, Any] = {
        "messages": [{"body": _b("a", binary)}, {"body": _b("b", binary), "groupe": "g"}]
    }
    status, out = await _call(http, "/v2/topics/t/messages", body, binary)
    _refused(status, out, "messages[1]: unknown member 'groupe'", "(did you mean 'group'?)")
    body = {"messages": [{"body": _b("a", binary)}], "x": 1}
    status, out = await _call(http, "/v2/topics/t/messages", body, binary)
    _refused(status, out, "unknown member 'x'", "expected messages")
    assert await _counts(http, "sub") == (0, 0)


# receive, delete, visibility ----------------------------------------------------

RECEIVE_CASES = [
    ({"max_messages": 10, "visibility_timeout": 600}, "visibility_timeout", "visibility_timeout_s"),
    ({"max_messages": 10, "wait_time": 5}, "wait_time", "wait_time_s"),
    ({"max_message": 10}, "max_message", "max_messages"),
]


@pytest.mark.parametrize("binary", [False, True], ids=["json", "msgpack"])
@pytest.mark.parametrize(
    ("body", "wrong", "meant"), RECEIVE_CASES, ids=[c[1] for c in RECEIVE_CASES]
)
async def test_a_receive_with_an_unknown_member_is_refused_and_locks_nothing(
    http: aiohttp.ClientSession, binary: bool, body: dict[str, Any], wrong: str, meant: str
) -> None:
    await _queue(http, "typo")
    await _enqueue(http, "typo", "a")
    status, out = await _call(http, "/v2/queues/typo/messages/receive", body, binary)
    _refused(status, out, f"unknown member {wrong!r}", f"(did you mean {meant!r}?)")
    assert await _counts(http, "typo") == (1, 0)
    [m] = await _receive(http, "typo")
    assert m["receive_count"] == 1


@pytest.mark.parametrize("binary", [False, True], ids=["json", "msgpack"])
async def test_a_delete_with_an_unknown_member_is_refused_and_deletes_nothing(
    http: aiohttp.ClientSession, binary: bool
) -> None:
    await _queue(http, "typo")
    await _enqueue(http, "typo", "a")
    [m] = await _receive(http, "typo")
    path = "/v2/queues/typo/messages/delete"
    for body, parts in [
        ({"receipts": [m["receipt"]], "receipt": m["receipt"]}, ("unknown member 'receipt'",)),
        ({"ids": [m["id"]], "id": m["id"]}, ("unknown member 'id'",)),
        (
            {"receipts": [m["receipt"]], "visibility_timeout_s": 0},
            ("unknown member 'visibility_timeout_s'", "expected ids, receipts"),
        ),
    ]:
        status, out = await _call(http, path, body, binary)
        _refused(status, out, *parts)
    assert await _counts(http, "typo") == (1, 1)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "msgpack"])
async def test_a_visibility_change_with_an_unknown_member_is_refused_and_changes_nothing(
    http: aiohttp.ClientSession, binary: bool
) -> None:
    await _queue(http, "typo")
    await _enqueue(http, "typo", "a")
    [m] = await _receive(http, "typo")
    path = "/v2/queues/typo/messages/visibility"
    for body, parts in [
        (
            {"receipts": [m["receipt"]], "visibility_timeout_s": 0, "visibility_timeout": 0},
            ("unknown member 'visibility_timeout'", "(did you mean 'visibility_timeout_s'?)"),
        ),
        (
            {"ids": [m["id"]], "visibility_timeout_s": 0, "max_messages": 1},
            ("unknown member 'max_messages'",),
        ),
    ]:
        status, out = await _call(http, path, body, binary)
        _refused(status, out, *parts)
    assert await _receive(http, "typo") == []  # still in flight: not released
    assert await _counts(http, "typo") == (1, 1)


# transactions -------------------------------------------------------------------


@pytest.mark.parametrize("binary", [False, True], ids=["json", "msgpack"])
async def test_a_transaction_item_with_an_unknown_member_applies_nothing(
    http: aiohttp.ClientSession, binary: bool
) -> None:
    await _queue(http, "in")
    await _queue(http, "out")
    await _enqueue(http, "in", "job")
    [m] = await _receive(http, "in")
    delete = {"queue": "in", "receipt": m["receipt"]}
    for body, parts in [
        (
            {
                "delete": [delete],
                "enqueue": [
                    {"queue": "out", "body": _b("ok", binary)},
                    {"queue": "out", "body": _b("x", binary), "dedupe_id": "k"},
                ],
            },
            ("enqueue[1]: unknown member 'dedupe_id'", "(did you mean 'dedup_id'?)"),
        ),
        (
            {"delete": [delete], "enqueue": [{"queue": "out", "body": _b("x", binary), "q": 1}]},
            ("enqueue[0]: unknown member 'q'",),
        ),
        (
            {"delete": [delete | {"reciept": "r"}]},
            ("delete[0]: unknown member 'reciept'", "(did you mean 'receipt'?)"),
        ),
        (
            {"delete": [delete], "enqueues": []},
            ("unknown member 'enqueues'", "(did you mean 'enqueue'?)"),
        ),
    ]:
        status, out = await _call(http, TXN, body, binary)
        _refused(status, out, *parts)
    assert await _counts(http, "out") == (0, 0)
    assert await _counts(http, "in") == (1, 1)  # the input is neither deleted nor released
    # the receipt is still current: a corrected transaction commits
    status, out = await _call(
        http, TXN, {"delete": [delete], "enqueue": [{"queue": "out", "body": "x"}]}
    )
    assert status == 200 and out["deleted"] == 1, out


# every legitimate member ---------------------------------------------------------


@pytest.mark.parametrize("binary", [False, True], ids=["json", "msgpack"])
async def test_every_legitimate_member_is_accepted(
    http: aiohttp.ClientSession, binary: bool
) -> None:
    await _queue(http, "ok")
    await _queue(http, "out")
    raw = base64.b64encode(b"\xff\x00").decode()
    messages = [
        {
            "body": raw,
            "encoding": "base64",
            "attributes": {"k": "v"},
            "group": "g",
            "dedup_id": "d1",
            "delay_s": None,
        },
        {"body": _b("late", binary), "encoding": "utf-8", "delay_s": 0, "group": None},
        {"body": _b("plain", binary), "attributes": None, "dedup_id": None},
    ]
    status, out = await _call(http, "/v2/queues/ok/messages", {"messages": messages}, binary)
    assert status == 200 and len(out["ids"]) == 3, out
    async with http.put("/v1/topics/t") as r:
        assert r.status < 300
    async with http.put("/v1/topics/t/queues/out") as r:
        assert r.status < 300
    status, out = await _call(http, "/v2/topics/t/messages", {"messages": messages}, binary)
    assert status == 200 and len(out["ids"]["out"]) == 3, out
    body: dict[str, Any] = {"max_messages": 10, "visibility_timeout_s": 30, "wait_time_s": 0}
    status, out = await _call(http, "/v2/queues/ok/messages/receive", body, binary)
    assert status == 200 and len(out["messages"]) == 3, out
    got = out["messages"]
    ids = [got[0]["id"]]
    receipts = [got[1]["receipt"]]
    body = {"ids": ids, "receipts": receipts, "visibility_timeout_s": 60}
    status, out = await _call(http, "/v2/queues/ok/messages/visibility", body, binary)
    assert status == 200 and len(out["changed"]) == 2, out
    status, out = await _call(
        http, "/v2/queues/ok/messages/delete", {"ids": ids, "receipts": receipts}, binary
    )
    assert status == 200 and out["deleted"] == 2, out
    status, out = await _call(
        http, "/v2/queues/ok/messages/receive", {"visibility_timeout_s": None}, binary
    )
    assert status == 200, out
    txn = {
        "delete": [{"queue": "ok", "receipt": got[2]["receipt"]}],
        "enqueue": [
            {
                "queue": "out",
                "body": raw,
                "encoding": "base64",
                "attributes": {"k": "v"},
                "group": "g",
                "dedup_id": "t1",
                "delay_s": None,
            },
            {"queue": "out", "body": _b("late", binary), "delay_s": 1.5},
        ],
    }
    status, out = await _call(http, TXN, txn, binary)
    assert status == 200 and out["deleted"] == 1 and len(out["enqueued"]) == 2, out
