"""Batch-completion tracking through the HTTP API (Carlyle's routes), on one in-process node."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dynaq.clock import ManualClock
from dynaq.node import Node
from tests.fixtures.nodes import node_config

EXACT = "/api/v1/batch/exact"
ESTIMATED = "/api/v1/batch/estimated"
EST = "/api/v1/batch/estimated"


async def _json(resp: aiohttp.ClientResponse, status: int = 200) -> Any:
    body = await resp.json()
    assert resp.status == status, body
    return body


async def _open(http: aiohttp.ClientSession, base: str = EXACT, user_key: str | None = None) -> int:
    body = {"userKey": user_key} if user_key is not None else {}
    batch_id = (await _json(await http.post(base, json=body)))["batchId"]
    assert isinstance(batch_id, int) and 0 < batch_id < 2**53
    return int(batch_id)


async def _add(http: aiohttp.ClientSession, batch_id: int, n: int) -> list[str]:
    r = await http.post(f"{EXACT}/items", json={"batchId": batch_id, "items": n})
    blocks = (await _json(r))["batchItemGroupIds"]
    assert sum(b["upto"] for b in blocks) == n
    return [f"{batch_id}:{b['id']}:{i}" for b in blocks for i in range(b["upto"])]


async def _ack(http: aiohttp.ClientSession, ids: list[str]) -> list[dict[str, Any]]:
    r = await http.post(f"{EXACT}/items/ack", json={"batchItemIds": ids})
    return list((await _json(r))["batchCompletions"])


async def _close(http: aiohttp.ClientSession, batch_id: int, base: str = EXACT) -> bool:
    path = f"{base}/close/{batch_id}" if base == EXACT else f"{base}/{batch_id}/close"
    return bool((await _json(await http.post(path)))["isComplete"])


async def test_close_after_acks_reports_completion_on_close(http: aiohttp.ClientSession) -> None:
    b = await _open(http, user_key="catalog-7")
    ids = await _add(http, b, 130)
    assert await _ack(http, ids[:100]) == []
    assert await _ack(http, ids[100:]) == []  # not closed: not complete
    assert await _close(http, b) is True
    assert await _close(http, b) is True  # still complete, but no second completion event
    got = await _json(await http.get(f"{EXACT}/{b}"))
    assert got["isComplete"] and got["isClosed"] and got["items"] == 130
    assert got["userKey"] == "catalog-7" and got["pending"] == 0


async def test_close_before_acks_reports_completion_on_last_ack(
    http: aiohttp.ClientSession,
) -> None:
    b = await _open(http, user_key="u")
    ids = await _add(http, b, 70)
    ids += await _add(http, b, 5000)  # two requests, three blocks
    assert await _close(http, b) is False
    assert await _ack(http, ids[:-1]) == []
    assert await _ack(http, ids[:10]) == []  # duplicates change nothing
    done = await _ack(http, ids[-1:])
    assert [(d["batchId"], d["userKey"]) for d in done] == [(b, "u")]
    assert await _ack(http, ids[-1:]) == []  # exactly once
    assert await _close(http, b) is True


async def test_an_ack_request_with_one_bad_id_changes_nothing(
    http: aiohttp.ClientSession,
) -> None:
    """Acks across batches are checked whole first: one bad id (an unknown block, an
    index beyond its block) refuses the request and acks nothing, so the completion
    a good id would cause is reported by the call that makes it, not lost."""
    b = await _open(http, user_key="whole")
    (good,) = await _add(http, b, 1)
    assert await _close(http, b) is False
    other = await _open(http)
    (past,) = await _add(http, other, 1)
    beyond = past.rsplit(":", 1)[0] + ":5"
    unknown = f"{other}:00000000-0000-0000-0000-000000000000:0"
    for bad, status in ((unknown, 404), (beyond, 422)):
        r = await http.post(f"{EXACT}/items/ack", json={"batchItemIds": [good, bad]})
        await _json(r, status)
        assert not (await _json(await http.get(f"{EXACT}/{b}")))["isComplete"]
    done = await _ack(http, [good])
    assert [(d["batchId"], d["userKey"]) for d in done] == [(b, "whole")]


async def test_closed_batch_refuses_items_and_empty_batch_completes_on_close(
    http: aiohttp.ClientSession,
) -> None:
    b = await _open(http)
    assert await _close(http, b) is True  # no items: complete at once
    r = await http.post(f"{EXACT}/items", json={"batchId": b, "items": 3})
    assert r.status == 409 and (await r.json())["code"] == "batch_closed"


async def test_bad_input_gets_precise_errors(http: aiohttp.ClientSession) -> None:
    b = await _open(http)
    ids = await _add(http, b, 10)
    block = ids[0].split(":")[1]
    cases: list[tuple[str, str, Any, int]] = [
        ("post", f"{EXACT}/items", {"batchId": b, "items": 0}, 422),
        ("post", f"{EXACT}/items", {"batchId": b, "items": -5}, 422),
        ("post", f"{EXACT}/items", {"batchId": b, "items": "7"}, 422),
        ("post", f"{EXACT}/items", {"batchId": b, "items": 10**9}, 422),
        ("post", f"{EXACT}/items", {"batchId": 12345, "items": 1}, 404),
        ("post", f"{EXACT}/items", {"batchId": "x", "items": 1}, 422),
        ("post", f"{EXACT}/items", [1, 2], 422),
        ("post", f"{EXACT}/items/ack", {"batchItemIds": ["nope"]}, 422),
        ("post", f"{EXACT}/items/ack", {"batchItemIds": [f"{b}:not-a-uuid:1"]}, 422),
        ("post", f"{EXACT}/items/ack", {"batchItemIds": [f"{b}:{block}:10"]}, 422),
        ("post", f"{EXACT}/items/ack", {"batchItemIds": [f"{b}:{block}:-1"]}, 422),
        ("post", f"{EXACT}/items/ack", {"batchItemIds": [f"{b + 1}:{block}:1"]}, 404),
        ("post", f"{EXACT}/items/ack", {"batchItemIds": []}, 422),
        ("post", f"{EXACT}/items/ack", {"batchItemIds": [7]}, 422),
        ("get", f"{EXACT}/999999", None, 404),
        ("post", f"{EXACT}/close/999999", None, 404),
        ("post", f"{EST}/decr", {"acks": [{"batchId": b, "by": 1}]}, 422),  # wrong mode
        ("post", f"{EST}/decr", {"acks": [{"batchId": b, "by": 0}]}, 422),
        ("delete", f"{EXACT}/open", None, 422),  # since is required
        ("delete", f"{EXACT}/open?since=yesterday", None, 422),
    ]
    for method, path, body, status in cases:
        r = await http.request(method, path, json=body)
        got = await r.json()
        assert r.status == status, (method, path, body, got)
        assert got["error"] and got["code"], got
    r = await http.post(
        f"{EXACT}/items", data=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert r.status == 422 and "malformed JSON" in (await r.json())["error"]
    # The failed ack of index 10 cleared nothing: the batch still completes normally.
    assert await _close(http, b) is False
    assert len(await _ack(http, ids)) == 1


async def test_100_consumers_100k_items_with_duplicates_complete_exactly_once(
    http: aiohttp.ClientSession,
) -> None:
    b = await _open(http, user_key="big")
    ids = await _add(http, b, 100_000)
    assert await _close(http, b) is False
    rng = random.Random(7)
    work = ids + rng.sample(ids, 10_000)  # 10 % duplicate acks
    rng.shuffle(work)
    chunks = [work[i : i + 100] for i in range(0, len(work), 100)]
    queue: asyncio.Queue[list[str]] = asyncio.Queue()
    for c in chunks:
        queue.put_nowait(c)
    completions: list[dict[str, Any]] = []

    async def consumer() -> None:
        while not queue.empty():
            completions.extend(await _ack(http, queue.get_nowait()))

    await asyncio.wait_for(asyncio.gather(*(consumer() for _ in range(100))), 60)
    assert [c["batchId"] for c in completions] == [b]
    got = await _json(await http.get(f"{EXACT}/{b}"))
    assert got["isComplete"] and got["items"] == 100_000 and got["pending"] == 0


async def test_per_batch_state_is_dropped_when_idle(
    node: Node, http: aiohttp.ClientSession
) -> None:
    """Header locks and ack combiners exist only while a batch is being updated."""
    for _ in range(20):
        b = await _open(http)
        ids = await _add(http, b, 10)
        await _ack(http, ids)
        await _close(http, b)
    assert node.batches._locks == {} and node.batches._lock_users == {}
    assert node.batches._combiners == {}


async def test_estimated_mode_counts_and_double_counts(http: aiohttp.ClientSession) -> None:
    b = await _open(http, EST, user_key="est")
    got = await _json(await http.post(f"{EST}/{b}/incr?by=3"))
    assert got["pending"] == 3 and got["items"] == 3
    assert await _close(http, b, EST) is False
    r = await http.post(f"{EST}/{b}/incr?by=1")
    assert r.status == 409  # closed: the count cannot grow
    # Every `by` is applied (Carlyle applied only one per request).
    assert await _json(await http.post(f"{EST}/decr", json={"acks": [{"batchId": b, "by": 1}]}))
    # The same item acked twice counts twice: the batch completes one item early.
    done = (
        await _json(
            await http.post(
                f"{EST}/decr", json={"acks": [{"batchId": b, "by": 1}, {"batchId": b, "by": 1}]}
            )
        )
    )["batchCompletions"]
    assert [(d["batchId"], d["userKey"]) for d in done] == [(b, "est")]
    assert (await _json(await http.get(f"{EST}/{b}")))["isComplete"]
    removed = await _json(await http.delete(f"{EST}/{b}"))
    assert removed == {"batchesRemoved": 1, "itemsRemoved": 3}
    assert (await http.get(f"{EST}/{b}")).status == 404


async def test_reaper_removes_idle_open_and_old_closed_batches(
    tmp_path: Path, clock: ManualClock
) -> None:
    # The background reaper is off here: rounds are run by hand, one per clock step.
    node = Node(node_config(tmp_path, batches={"reap_interval_s": 0}), clock=clock)
    await node.start()
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{node.port}") as http:
            await _reaper_rounds(node, http, clock)
    finally:
        await node.stop()


async def _reaper_rounds(node: Node, http: aiohttp.ClientSession, clock: ManualClock) -> None:
    empty_open = await _open(http)  # no items: Carlyle's reaper never removed these
    with_items = await _open(http)
    await _add(http, with_items, 10)
    closed = await _open(http)
    await _add(http, closed, 5)
    await _close(http, closed, EXACT)
    clock.advance(7200 + 60 + 1)  # the age limit, plus the margin for clock skew
    fresh = await _open(http)
    assert await node.batches.reap_once() == (2, 10)
    for b in (empty_open, with_items):
        assert (await http.get(f"{EXACT}/{b}")).status == 404
    for b in (closed, fresh):
        assert (await http.get(f"{EXACT}/{b}")).status == 200
    clock.advance(604_800)
    await node.batches.reap_once()
    assert (await http.get(f"{EXACT}/{closed}")).status == 404
    # The open one is idle too by now.
    assert (await http.get(f"{EXACT}/{fresh}")).status == 404


async def test_admin_removal_by_since(http: aiohttp.ClientSession, clock: ManualClock) -> None:
    old = await _open(http)
    await _add(http, old, 3)
    clock.advance(10)
    since = clock.wall_ms()
    new = await _open(http)
    r = await _json(await http.delete(f"{EXACT}/open?since={since}"))
    assert r == {"batchesRemoved": 1, "itemsRemoved": 3}
    assert (await http.get(f"{EXACT}/{old}")).status == 404
    assert (await http.get(f"{EXACT}/{new}")).status == 200
    assert await _json(await http.delete(f"{EXACT}/closed?since={since}")) == {
        "batchesRemoved": 0,
        "itemsRemoved": 0,
    }


async def test_admin_removal_keeps_to_its_routes_mode(
    http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    """``DELETE /exact/open`` removes exact batches only: an admin of exact batches
    must not reach another team's estimated ones (nor the reverse)."""
    exact, estimated = await _open(http), await _open(http, ESTIMATED)
    clock.advance(10)
    since = clock.wall_ms()
    assert (await _json(await http.delete(f"{EXACT}/open?since={since}")))["batchesRemoved"] == 1
    assert (await http.get(f"{ESTIMATED}/{estimated}")).status == 200
    r = await _json(await http.delete(f"{ESTIMATED}/open?since={since}"))
    assert r["batchesRemoved"] == 1
    assert (await http.get(f"{EXACT}/{exact}")).status == 404


async def test_reaper_runs_on_one_node_only(node: Node) -> None:
    from dynaq.core.membership import Member

    me = node.view.me
    others = [Member(f"n{i}", f"127.0.0.1:{i}") for i in range(5)]
    node.view.replace([me, *others])
    owner = node.view.owner_of_lane(node.batches._reaper_lane)
    assert node.batches.is_reaper() == (owner.name == me.name)
    # The lease fences a second reaper even when both think they own it.
    assert await node.batches._take_lease() is True
    node.view.me = Member("other", "127.0.0.1:9")
    assert await node.batches._take_lease() is False


async def test_queue_messages_ack_items_and_publish_one_completion(
    tmp_path: Path, clock: ManualClock
) -> None:
    n = Node(node_config(tmp_path, batches={"completion_topic": "done"}), clock=clock)
    await n.start()
    try:
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{n.port}") as http:
            for q in ("work", "events"):
                assert (await http.put(f"/v1/queues/{q}")).status == 201
            await http.put("/v1/topics/done")
            await http.put("/v1/topics/done/queues/events")
            b = await _open(http, user_key="fanout")
            ids = await _add(http, b, 300)
            # v2 batch enqueue with the attribute, and v1 single enqueue with the query param.
            msgs = [
                {"body": f"m{i}", "attributes": {"dynaq.batch_item": i_}}
                for i, i_ in enumerate(ids[:299])
            ]
            r = await http.post("/v2/queues/work/messages", json={"messages": msgs})
            assert r.status == 200
            r = await http.put(f"/v1/queues/work/message?batch_item_id={ids[299]}", data=b"last")
            assert r.status == 200
            bad = await http.put("/v1/queues/work/message?batch_item_id=garbage", data=b"x")
            assert bad.status == 422
            assert await _close(http, b) is False
            got = 0
            for _ in range(20):
                r = await http.post("/v2/queues/work/messages/receive", json={"max_messages": 100})
                batch = (await _json(r))["messages"]
                if not batch:
                    break
                got += len(batch)
                d = await http.post(
                    "/v2/queues/work/messages/delete", json={"ids": [m["id"] for m in batch]}
                )
                assert d.status == 200
            assert got == 300
            assert (await _json(await http.get(f"{EXACT}/{b}")))["isComplete"]
            r = await http.post("/v2/queues/events/messages/receive", json={"max_messages": 10})
            events = (await _json(r))["messages"]
            assert len(events) == 1
            event = json.loads(events[0]["body"])
            assert event["batchId"] == b and event["userKey"] == "fanout" and event["completedAt"]
    finally:
        await n.stop()


async def test_exact_acks_race_across_services_on_cassandra(cassandra: Any) -> None:
    """Two batch services (two nodes) on one Cassandra ack one batch concurrently:
    the version checks lose no bit clear and report one completion."""
    from dynaq.clock import SystemClock
    from dynaq.core.batch_items import parse_item_id
    from dynaq.core.membership import Member, MembershipView
    from dynaq.metrics import NullMetrics
    from dynaq.services.batches import EXACT as MODE
    from dynaq.services.batches import BatchService
    from dynaq.storage.cassandra import CassandraStore
    from tests.fixtures.cassandra import new_keyspace

    first = CassandraStore([cassandra.host], keyspace=new_keyspace())
    await first.open()
    second = CassandraStore([cassandra.host], keyspace=first.keyspace)
    await second.open()
    try:
        services = [
            BatchService(s, SystemClock(), MembershipView(Member(f"n{i}", "x:1")), NullMetrics())
            for i, s in enumerate([first, second])
        ]
        b = await services[0].open(MODE, "cass")
        blocks = await services[0].add_items(b, 600)
        assert await services[1].close(b, MODE) is False
        refs = [parse_item_id(f"{b}:{blk}:{i}") for blk, n in blocks for i in range(n)]
        random.Random(3).shuffle(refs)
        done = await asyncio.gather(
            *(services[k % 2].ack(refs[i : i + 50]) for k, i in enumerate(range(0, len(refs), 50)))
        )
        assert [c.batch_id for d in done for c in d] == [b]
        assert (await services[1].get(b)).complete
    finally:
        await second.close()
        await first.close()


def test_bench_batches_quick_reports_its_figures() -> None:
    """``python -m bench batches --quick``, with its same-run yardstick: Carlyle's exact
    mode on a real MariaDB and its estimated mode on a real redis-server."""
    import os

    from bench import batches as bench_batches
    from dynaq.testing.servers import mariadb, redis

    missing = [why for why in (mariadb.available(), redis.available()) if why is not None]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail("; ".join(missing))
        pytest.skip("; ".join(missing))
    result = bench_batches.main(["--quick", "--baseline-seconds", "5"])
    assert result["completions"] == 1
    for figure in (
        "item_acks_per_s",
        "storage_bytes_per_item",
        "estimated_item_acks_per_s",
        "carlyle_exact_items_per_s",
        "carlyle_estimated_items_per_s",
        "ratio_vs_carlyle_exact",
        "ratio_vs_carlyle_estimated",
    ):
        assert isinstance(result[figure], int | float) and result[figure] > 0, figure
    assert result["ratio_vs_carlyle_exact"] == pytest.approx(
        result["item_acks_per_s"] / result["carlyle_exact_items_per_s"], abs=0.01
    )
    # Carlyle's bit updates really ran: acks went through, none failed silently, and a
    # finished run saw its batch complete (at least once: its check is not transactional).
    assert result["carlyle_exact_items_acked"] > 0
    if result["carlyle_exact_items_acked"] == result["acks_sent"]:
        assert result["carlyle_exact_completions"] >= 1


async def test_decr_that_fails_midway_answers_what_it_completed_and_what_to_retry(
    tmp_path: Path, clock: ManualClock
) -> None:
    from dynaq.core import keys
    from dynaq.storage.memory import MemoryStore
    from tests.services.batch_faults import Fault, FaultyStore

    store = FaultyStore(MemoryStore(), prefix=b"-")
    n = Node(node_config(tmp_path), clock=clock, store=store)
    await n.start()
    try:
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{n.port}") as http:
            a, b = await _open(http, EST, "a"), await _open(http, EST, "b")
            for batch in (a, b):
                await _json(await http.post(f"{EST}/{batch}/incr?by=2"))
                assert await _close(http, batch, EST) is False
            # Validated first: one unknown batch and nothing is applied.
            acks = [{"batchId": a, "by": 2}, {"batchId": b, "by": 1}, {"batchId": 1, "by": 1}]
            r = await http.post(f"{EST}/decr", json={"acks": acks})
            assert r.status == 404
            store.prefix, store.fault = keys.batch_header(b), Fault("put_if_version", 1, "fail")
            r = await http.post(f"{EST}/decr", json={"acks": acks[:2]})
            body = await _json(r, 503)
            assert body["code"] == "decr_incomplete"
            assert [c["batchId"] for c in body["batchCompletions"]] == [a]
            assert [(f["batchId"], f["by"], f["code"]) for f in body["failed"]] == [
                (b, 1, "storage_unavailable")
            ]
            r = await http.post(f"{EST}/decr", json={"acks": [{"batchId": b, "by": 1}]})
            assert (await _json(r))["batchCompletions"] == []
            assert (await _json(await http.get(f"{EST}/{b}")))["pending"] == 1
    finally:
        await n.stop()


async def test_a_decr_entry_with_an_unknown_member_counts_nothing(
    http: aiohttp.ClientSession,
) -> None:
    """A misspelt ``by`` would count one, silently: the entry is refused whole."""
    batch = (await (await http.post(ESTIMATED, json={})).json())["batchId"]
    r = await http.post(f"{ESTIMATED}/decr", json={"acks": [{"batchId": batch, "bye": 5}]})
    assert r.status == 422 and "unknown member 'bye'" in (await r.json())["error"]
