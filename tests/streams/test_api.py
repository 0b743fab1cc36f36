"""Streams over HTTP against a real node process: declaring, appending, listening.

One node serves the whole module (streams of different names do not interact);
each test uses streams of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgpack
import pytest

from dynaq.testing.process import NodeProcess, node_process
from tests.streams.helpers import TRADES, append, declare, jsonl, polymorphic, read


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """A real ``dynaq server`` process (sync fixture: one per module, no shared loop)."""
    proc = node_process(tmp_path_factory.mktemp("streams")).start()
    try:
        yield proc
    finally:
        proc.terminate()
    assert "unhandled error" not in proc.log_path.read_text(errors="replace")


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
        yield s


async def test_declare_is_idempotent_extensible_and_checked(
    node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    url = node.url
    status, body = await declare(http, url, "decl", polymorphic("a", "b"))
    assert status == 201 and body["created"] is True and len(body["signature"]) == 64
    sig = body["signature"]
    # Same schema, keys in another order: same signature, a no-op.
    reordered = json.loads(json.dumps(polymorphic("a", "b"), sort_keys=True))
    status, again = await declare(http, url, "decl", reordered)
    assert (status, again["created"], again["extended"], again["signature"]) == (
        200,
        False,
        False,
        sig,
    )
    # A new oneOf variant extends it.
    status, ext = await declare(http, url, "decl", polymorphic("a", "b", "c"))
    assert status == 200 and ext["extended"] is True and ext["signature"] != sig
    # Removing a variant, changing one, or the order key: refused.
    for schema, key in (
        (polymorphic("a", "b"), "ts"),
        (polymorphic("a", "x", "c"), "ts"),
        (polymorphic("a", "b", "c"), None),
    ):
        status, err = await declare(http, url, "decl", schema, key)
        assert status == 409 and err["code"] == "schema_conflict", err
    # Bad declarations: precise 422s.
    cases = [
        ({"type": "nonsense"}, "ts", "not a valid JSON Schema"),
        (TRADES, "missing", "must be a required field"),
        ({"oneOf": [{"type": "object"}]}, None, "must name its variant"),
    ]
    for schema, key, text in cases:
        status, err = await declare(http, url, "decl2", schema, key)
        assert status == 422 and text in err["error"], err
    async with http.put(f"{url}/v2/streams/bad name!", json={"schema": TRADES}) as r:
        assert r.status == 422 and (await r.json())["code"] == "invalid_name"
    async with http.get(f"{url}/v2/streams/decl/schema") as r:
        described = await r.json()
        assert described["schema"] == polymorphic("a", "b", "c")
        assert described["signature"] == ext["signature"]
    async with http.get(f"{url}/v2/streams") as r:
        names = [s["name"] for s in (await r.json())["streams"]]
        assert "decl" in names and "decl2" not in names


async def test_appends_are_validated_and_ordered(
    node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    url = node.url
    await declare(http, url, "ev", polymorphic("buy", "sell"))
    ok = [{"type": "buy", "ts": 1, "buy": "x"}, {"type": "sell", "ts": 1, "sell": "y"}]
    assert await append(http, url, "ev", ok) == (200, {"first_index": 0, "count": 2})
    # The entry and the field are named; nothing of the batch is written.
    status, err = await append(
        http,
        url,
        "ev",
        [{"type": "buy", "ts": 2, "buy": "z"}, {"type": "sell", "ts": 3, "sell": 7}],
    )
    assert status == 422 and err["error"].startswith("entries[1].sell: 7 is not of type"), err
    status, err = await append(http, url, "ev", [{"type": "hold", "ts": 3, "hold": "?"}])
    assert status == 422 and err["error"].startswith("entries[0].type: must be one of"), err
    status, err = await append(
        http,
        url,
        "ev",
        [{"type": "buy", "ts": 5, "buy": "a"}, {"type": "buy", "ts": 0, "buy": "b"}],
    )
    assert status == 409 and err["code"] == "order_key_decreased", err
    assert "entries[1] (index 3)" in err["error"], err
    status, err = await append(http, url, "ev", [{"type": "buy", "ts": -1, "buy": "b"}])
    assert status == 422 and "order key" in err["error"]
    # msgpack bodies too.
    packed = msgpack.packb({"entries": [{"type": "buy", "ts": 9, "buy": "m"}]})
    headers = {"Content-Type": "application/msgpack"}
    async with http.post(f"{url}/v2/streams/ev/entries", data=packed, headers=headers) as r:
        assert r.status == 200 and await r.json() == {"first_index": 2, "count": 1}
    for bad_entry in ({"buy": b"\xff"}, {"buy": "ok", "x": float("nan")}):
        bad = msgpack.packb({"entries": [{"type": "buy", "ts": 9, **bad_entry}]})
        async with http.post(f"{url}/v2/streams/ev/entries", data=bad, headers=headers) as r:
            assert r.status == 422, bad_entry
    bodies: list[dict[str, Any]] = [{"entries": []}, {"entries": "x"}, {"other": 1}, {}]
    for bad_body in bodies:
        async with http.post(f"{url}/v2/streams/ev/entries", json=bad_body) as r:
            assert r.status == 422, bad_body
    assert (await append(http, url, "nope", ok))[0] == 404
    status, data, _ = await read(http, url, "ev", nowait="true")
    assert [(i, k, e["ts"]) for i, k, e in jsonl(data)] == [(0, 1, 1), (1, 1, 1), (2, 9, 9)]


async def test_every_start_and_stop(node: NodeProcess, http: aiohttp.ClientSession) -> None:
    url = node.url
    await declare(http, url, "ticks", TRADES)
    await append(http, url, "ticks", [{"ts": 10 * i, "price": i} for i in range(100)])
    await declare(http, url, "plain", {"type": "integer"}, None)
    await append(http, url, "plain", list(range(5)))

    async def indexes(name: str = "ticks", **params: str | int) -> list[int]:
        status, body, _ = await read(http, url, name, nowait="true", **params)
        return [i for i, _, _ in jsonl(body)] if status == 200 else []

    assert await indexes() == list(range(100))
    assert await indexes(i=95) == [95, 96, 97, 98, 99]
    assert await indexes(tail=3) == [97, 98, 99]
    assert await indexes(since=455) == list(range(46, 100))
    assert await indexes(since=450, n=2) == [45, 46]
    assert await indexes(i=10, until=125) == [10, 11, 12]
    assert await indexes(i=10, until=5) == []
    # stop_after_bytes: stops after the entry that reaches the count.
    line = len(b'{"index": 10, "order": 100}\t{"ts":100,"price":10}\n')
    assert await indexes(i=10, stop_after_bytes=line + 1) == [10, 11]
    # The order key of an order-key-less stream is the index.
    status, body, _ = await read(http, url, "plain", nowait="true", since=3)
    assert [(i, k, e) for i, k, e in jsonl(body)] == [(3, 3, 3), (4, 4, 4)]
    # recent: a window of order keys back from now (epoch ms); ticks are far in the past.
    assert await indexes(recent=1000) == []
    status, _, headers = await read(http, url, "ticks", nowait="true", recent=1000)
    assert status == 204 and headers["X-Stream-Size"] == "100"
    status, _, _ = await read(http, url, "plain", nowait="true", recent=1000)
    assert status == 422
    # Formats.
    _, body, headers = await read(http, url, "ticks", nowait="true", tail=2, format="array")
    assert headers["Content-Type"].startswith("application/json")
    assert json.loads(body) == [
        {"index": 98, "order": 980, "entry": {"ts": 980, "price": 98}},
        {"index": 99, "order": 990, "entry": {"ts": 990, "price": 99}},
    ]
    _, body, _ = await read(http, url, "ticks", nowait="true", tail=2, format="entries_only")
    assert [json.loads(x) for x in body.splitlines()] == [
        {"ts": 980, "price": 98},
        {"ts": 990, "price": 99},
    ]
    _, body, _ = await read(http, url, "ticks", nowait="true", tail=2, format="msgpack")
    unpacker = msgpack.Unpacker()
    unpacker.feed(body)
    assert [m["index"] for m in unpacker] == [98, 99]
    # Size: HEAD and sizeonly.
    async with http.head(f"{url}/v2/streams/ticks") as r:
        assert r.status == 200 and r.headers["X-Stream-Size"] == "100"
    status, body, headers = await read(http, url, "ticks", sizeonly="true")
    assert json.loads(body) == {"size": 100} and headers["X-Stream-Size"] == "100"
    # Bad parameters: precise 422s.
    for params in ({"i": "-1"}, {"i": 1, "tail": 2}, {"format": "xml"}, {"n": 0}, {"zz": 1}):
        status, body, _ = await read(http, url, "ticks", nowait="true", **params)
        assert status == 422, (params, body)
        assert json.loads(body)["code"] == "invalid_input"


async def test_listener_catches_up_then_follows_live_and_is_terminated(
    node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    url = node.url
    await declare(http, url, "live", TRADES)
    await append(http, url, "live", [{"ts": i, "price": 0.5} for i in range(5000)])
    got: list[int] = []
    async with http.get(f"{url}/v2/streams/live") as r:
        sub = r.headers["X-Subscription-Id"]
        # A second listener that reads nothing: it must not hold up appends or the first.
        async with http.get(f"{url}/v2/streams/live") as idle:
            assert idle.status == 200
            buffer = b""
            appended = False
            while True:
                chunk = await asyncio.wait_for(r.content.readany(), 10)
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                got += [json.loads(x.split(b"\t")[0])["index"] for x in lines]
                if len(got) == 5000 and not appended:
                    # Caught up: what is appended now arrives live.
                    for k in range(3):
                        status, _ = await append(http, url, "live", [{"ts": 9000 + k, "price": 1}])
                        assert status == 200
                    appended = True
                if len(got) == 5003:
                    break
        assert got == list(range(5003))
        async with http.delete(f"{url}/v2/streams/live/subscriptions/{sub}") as d:
            assert d.status == 204
        rest = await asyncio.wait_for(r.content.read(), 10)  # the response ends
        assert rest == b""
    async with http.delete(f"{url}/v2/streams/live/subscriptions/{sub}") as d:
        assert d.status == 404 and (await d.json())["code"] == "subscription_not_found"


async def test_publisher_lease_fences(node: NodeProcess, http: aiohttp.ClientSession) -> None:
    url = node.url
    await declare(http, url, "leased", TRADES)
    e = [{"ts": 1, "price": 1}]
    assert (await append(http, url, "leased", e))[0] == 200  # no lease: unfenced
    async with http.post(f"{url}/v2/streams/leased/publisher", json={"ttl_s": 30}) as r:
        assert r.status == 201
        first = (await r.json())["token"]
    status, err = await append(http, url, "leased", e)
    assert status == 409 and err["code"] == "publisher_fenced"
    assert (await append(http, url, "leased", e, token=first))[0] == 200
    async with http.post(f"{url}/v2/streams/leased/publisher") as r:
        assert r.status == 409  # held by another
    # Renewed by its holder; released; then taken by another with a newer token.
    headers = {"X-Publisher-Token": str(first)}
    async with http.post(f"{url}/v2/streams/leased/publisher", headers=headers) as r:
        assert r.status == 201 and (await r.json())["token"] == first
    async with http.delete(f"{url}/v2/streams/leased/publisher", headers=headers) as r:
        assert r.status == 204
    async with http.post(f"{url}/v2/streams/leased/publisher", json={"ttl_s": 0.3}) as r:
        second = (await r.json())["token"]
    assert second > first
    status, err = await append(http, url, "leased", e, token=first)
    assert status == 409 and err["code"] == "publisher_fenced"
    await asyncio.sleep(0.5)  # the lease expires: its holder is fenced out, others may append
    assert (await append(http, url, "leased", e, token=second))[0] == 409
    assert (await append(http, url, "leased", e))[0] == 200
    async with http.delete(f"{url}/v2/streams/leased/publisher") as r:
        assert r.status == 422  # the token is required


async def test_delete_ends_listeners_then_removes(
    node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    url = node.url
    await declare(http, url, "doomed", TRADES)
    await append(http, url, "doomed", [{"ts": 1, "price": 1}])
    async with http.get(f"{url}/v2/streams/doomed") as r:
        await r.content.readline()
        async with http.delete(f"{url}/v2/streams/doomed") as d:
            assert d.status == 204
        assert await asyncio.wait_for(r.content.read(), 10) == b""
    async with http.get(f"{url}/v2/streams/doomed/schema") as r:
        assert r.status == 404
    data_dir = Path(node.data_dir) / "streams"
    assert not await asyncio.to_thread((data_dir / "doomed").exists)
    # The name can be declared again, from index 0.
    assert (await declare(http, url, "doomed", TRADES))[0] == 201
    # At once, through whichever worker takes it (a declaration forwarded on a stale
    # route once reached the authority without a new record: 404 until the next one).
    got = await append(http, url, "doomed", [{"ts": 1, "price": 1}])
    assert got[0] == 200 and got[1]["first_index"] == 0, got


def _open_segments(node: NodeProcess, name: str) -> int:
    """How many of the node's file descriptors are a segment file of stream ``name``
    (the writer's own appends through an ``ab`` handle count too: subtract it)."""
    assert node.proc is not None
    fds = Path(f"/proc/{node.proc.pid}/fd")
    targets = []
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            targets.append(os.readlink(fd))
    return sum(1 for t in targets if f"/streams/{name}/" in t and t.endswith(".seg")) - 1


async def test_a_listener_whose_client_went_away_ends_while_the_stream_is_idle(
    tmp_path: Path,
) -> None:
    # One process: the test counts the files it holds open (a node of several
    # workers also holds its copies' and their listeners' files, in other processes).
    env = {"DYNAQ_STREAMS_LISTEN_IDLE_CHECK_S": "0.2", "DYNAQ_HTTP_WORKERS": "1"}
    node = node_process(tmp_path, env=env)
    await asyncio.to_thread(node.start)
    try:
        async with aiohttp.ClientSession() as http:
            await declare(http, node.url, "idle", TRADES)
            async with aiohttp.ClientSession() as gone:
                r = await gone.get(f"{node.url}/v2/streams/idle")
                assert r.status == 200
                await asyncio.sleep(0.3)
                assert await asyncio.to_thread(_open_segments, node, "idle") == 1
                r.close()  # the client disconnects; nothing is ever appended
            for _ in range(50):  # the listener ends and closes its file
                if await asyncio.to_thread(_open_segments, node, "idle") == 0:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("the listener of a closed connection still holds its file")
            status, _ = await append(http, node.url, "idle", [{"ts": 1, "price": 1}])
            assert status == 200
    finally:
        await asyncio.to_thread(node.kill)


async def test_concurrent_appends_share_fsyncs(
    node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    url = node.url
    await declare(http, url, "group", TRADES, None)

    async def fsyncs() -> int:
        async with http.get(f"{url}/v2/streams") as r:
            streams = (await r.json())["streams"]
        return int(next(s["fsyncs"] for s in streams if s["name"] == "group"))

    before = await fsyncs()
    results = await asyncio.gather(
        *(append(http, url, "group", [{"ts": k, "price": 1}]) for k in range(40))
    )
    assert all(status == 200 for status, _ in results)
    # Every append is durable when answered, and dense: indexes 0..39, each once.
    assert sorted(body["first_index"] for _, body in results) == list(range(40))
    used = await fsyncs() - before
    assert 1 <= used < 40, f"{used} fsyncs for 40 concurrent appends: no group commit"


async def test_concurrent_lease_requests_grant_one(
    node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    await declare(http, node.url, "race", TRADES)

    async def take() -> int:
        async with http.post(f"{node.url}/v2/streams/race/publisher") as r:
            return r.status

    statuses = await asyncio.gather(*(take() for _ in range(8)))
    assert sorted(statuses) == [201] + [409] * 7, statuses


async def test_a_backtracking_pattern_cannot_hold_the_node(
    node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    """``^(a+)+$`` takes exponential time in a backtracking engine (Python's ``re``:
    4 s at 28 characters, hours at 40). Entries are matched by a bounded engine, so
    the refusal is immediate and the node keeps answering meanwhile."""
    url = node.url
    schema = {"type": "object", "properties": {"k": {"type": "string", "pattern": "^(a+)+$"}}}
    assert (await declare(http, url, "redos", schema, order_key=None))[0] == 201
    loop = asyncio.get_running_loop()
    started = loop.time()
    status, err = await append(http, url, "redos", [{"k": "a" * 5000 + "b"}])
    assert status == 422 and err["error"].startswith('entries[0].k: "aaaa'), err
    assert len(err["error"]) <= 320, "the explanation quotes the value, cut short"
    assert await append(http, url, "redos", [{"k": "a" * 40}]) == (
        200,
        {"first_index": 0, "count": 1},
    )
    async with http.get(f"{url}/health") as r:
        assert r.status == 200
    assert loop.time() - started < 2.0


async def test_a_schema_the_validator_cannot_compile_is_refused_when_declared(
    http: aiohttp.ClientSession, node: NodeProcess
) -> None:
    async with http.put(
        f"{node.url}/v2/streams/dangling",
        json={"schema": {"$ref": "#/$defs/missing"}},
    ) as r:
        body = await r.json()
        assert r.status == 422, body
        assert body["error"].startswith("schema cannot be compiled for validation:"), body


async def test_a_stop_on_until_ends_reads_cleanly(
    node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    """``until`` below the first entry is nothing to send (204), and a live listener
    whose next entry is the first past ``until`` ends its answer there: both used to
    be taken for an unreadable record (a 503, or one written into the open body)."""
    url = node.url
    await declare(http, url, "stops", TRADES)
    await append(http, url, "stops", [{"ts": 1000 + 10 * i, "price": 1} for i in range(3)])
    for params in ({"until": 999}, {"until": 0, "n": 2}):
        status, body, _ = await read(http, url, "stops", nowait="true", **params)
        assert status == 204, (params, body)
    status, body, _ = await read(http, url, "stops", nowait="true", until=1015, format="array")
    assert status == 200 and [e["index"] for e in json.loads(body)] == [0, 1]
    async with http.get(f"{url}/v2/streams/stops", params={"until": "1500"}) as r:
        assert r.status == 200
        first = await asyncio.wait_for(r.content.readuntil(b"\n" * 1), 10)
        assert json.loads(first.split(b"\t")[0])["index"] == 0
        await append(http, url, "stops", [{"ts": 1400, "price": 2}])
        await append(http, url, "stops", [{"ts": 2000, "price": 3}])
        rest = await asyncio.wait_for(r.content.read(), 10)  # ends, and cleanly
    assert [i for i, _, _ in jsonl(first + rest)] == [0, 1, 2, 3]


async def test_integers_no_format_carries_are_refused_with_422(
    node: NodeProcess, http: aiohttp.ClientSession
) -> None:
    """JSON carries any integer; msgpack (a listen format, and what copies are sent in)
    only -2^63..2^64-1. Before, a schema or an entry holding a larger one was taken,
    and on a node of several workers (or a ring) the stream's copies could never be
    made: every append answered 503 ``replication_timeout``, the log 500s."""
    huge = 2**70
    status, body = await declare(http, node.url, "huge", {"maximum": huge}, None)
    assert (status, body["code"]) == (422, "invalid_input")
    assert "schema.maximum" in body["error"] and "2^64" in body["error"]
    assert (await declare(http, node.url, "huge", {"type": "object"}, None))[0] == 201
    for entry in ({"n": huge}, {"n": -(2**63) - 1}, {"deep": [{"n": 2**64}]}):
        status, body = await append(http, node.url, "huge", [entry])
        assert (status, body["code"]) == (422, "invalid_input"), (entry, body)
    bounds = [{"n": 2**64 - 1}, {"n": -(2**63)}]
    status, body = await append(http, node.url, "huge", bounds)
    assert (status, body["first_index"]) == (200, 0), body
    status, got, _ = await read(http, node.url, "huge", nowait="true", format="array")
    assert [e["entry"] for e in json.loads(got)] == bounds
