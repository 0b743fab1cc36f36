"""Dead-letter queues, redrive and purge tasks on one node (manual clock)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from dynaq.clock import ManualClock
from dynaq.core import ids as ids_mod
from dynaq.core import keys
from dynaq.node import Node
from dynaq.services.queues import purge as queue_purge


async def _call(
    http: aiohttp.ClientSession, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    async with http.request(method, path, json=body) as r:
        return r.status, await r.json()


async def _setup(http: aiohttp.ClientSession, max_receive_count: int = 3) -> None:
    for q in ("src", "dlq"):
        assert (await _call(http, "PUT", f"/v1/queues/{q}"))[0] == 201
    policy = {"dead_letter_queue": "dlq", "max_receive_count": max_receive_count}
    assert await _call(http, "PATCH", "/v1/queues/src", {"redrive_policy": policy}) == (200, "ok")


async def _receive(http: aiohttp.ClientSession, queue: str, n: int = 10) -> list[dict[str, Any]]:
    body = {"max_messages": n, "visibility_timeout_s": 5}
    status, out = await _call(http, "POST", f"/v2/queues/{queue}/messages/receive", body)
    assert status == 200
    return list(out["messages"])


async def _enqueue(http: aiohttp.ClientSession, queue: str, *messages: dict[str, Any]) -> list[str]:
    status, out = await _call(http, "POST", f"/v2/queues/{queue}/messages", {"messages": messages})
    assert status == 200
    return list(out["ids"])


async def _wait_task(http: aiohttp.ClientSession, clock: ManualClock, task: str) -> dict[str, Any]:
    for _ in range(500):
        status, rec = await _call(http, "GET", f"/v2/tasks/{task}")
        assert status == 200
        if rec["state"] != "running":
            return dict(rec)
        clock.advance(0.5)  # the redrive's rate limit sleeps on the node's clock
        await asyncio.sleep(0.01)
    raise AssertionError("task did not finish")


async def test_redrive_policy_is_validated_shown_and_listed(http: aiohttp.ClientSession) -> None:
    await _setup(http)
    status, desc = await _call(http, "GET", "/v2/queues/src")
    assert desc["redrive_policy"] == {"dead_letter_queue": "dlq", "max_receive_count": 3}
    assert (await _call(http, "GET", "/v2/queues/dlq"))[1]["redrive_policy"] is None
    assert await _call(http, "GET", "/v2/queues/dlq/dead_letter_sources") == (
        200,
        {"queues": ["src"]},
    )
    bad = [
        {"dead_letter_queue": "nope", "max_receive_count": 3},
        {"dead_letter_queue": "src", "max_receive_count": 3},
        {"dead_letter_queue": "dlq", "max_receive_count": 0},
        {"dead_letter_queue": "dlq", "max_receive_count": 1001},
        {"dead_letter_queue": "dlq", "max_receive_count": True},
        {"dead_letter_queue": "dlq"},
        {"dead_letter_queue": 5, "max_receive_count": 3},
        {"dead_letter_queue": "dlq", "max_receive_count": 3, "extra": 1},
        "dlq",
    ]
    for policy in bad:
        status, err = await _call(http, "PATCH", "/v1/queues/src", {"redrive_policy": policy})
        assert status == 422, policy
        assert err["code"] == "invalid_input" and "error" in err
    assert await _call(http, "PATCH", "/v1/queues/src", {"redrive_policy": None}) == (200, "ok")
    assert (await _call(http, "GET", "/v2/queues/src"))[1]["redrive_policy"] is None
    assert (await _call(http, "GET", "/v2/queues/dlq/dead_letter_sources"))[1] == {"queues": []}
    assert (await _call(http, "GET", "/v2/queues/nope/dead_letter_sources"))[0] == 404


async def test_poison_message_moves_after_exactly_max_receives_and_redrives_back(
    http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    await _setup(http, max_receive_count=3)
    [mid] = await _enqueue(http, "src", {"body": "poison", "attributes": {"k": "v"}})
    for n in (1, 2, 3):
        got = await _receive(http, "src")
        assert [(m["id"], m["receive_count"]) for m in got] == [(mid, n)]
        clock.advance(6)  # never deleted: the visibility timeout runs out
    assert await _receive(http, "src") == []  # the 4th receive moves it instead
    [dead] = await _receive(http, "dlq")
    assert dead["body"] == "poison" and dead["attributes"] == {"k": "v"}
    assert dead["receive_count"] == 1
    origin = dead["origin"]
    assert origin["queue"] == "src" and origin["id"] == mid and origin["receive_count"] == 3
    assert origin["dead_lettered_at_ms"] >= origin["enqueued_at_ms"] > 0
    assert (await _call(http, "GET", "/v2/queues/src"))[1]["depth"] == 0
    clock.advance(6)

    status, task = await _call(http, "POST", "/v2/queues/dlq/redrive", {"max_per_s": 10})
    assert status == 202 and task["kind"] == "redrive" and task["state"] == "running"
    done = await _wait_task(http, clock, task["id"])
    assert done["state"] == "done" and done["moved"] == 1 and done["skipped"] == 0
    [back] = await _receive(http, "src")
    assert back["body"] == "poison" and back["receive_count"] == 1 and "origin" not in back
    assert await _receive(http, "dlq") == []


async def test_dead_lettered_group_head_unblocks_its_group(
    http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    await _setup(http, max_receive_count=2)
    head, nxt = await _enqueue(
        http, "src", {"body": "head", "group": "g"}, {"body": "next", "group": "g"}
    )
    for _ in range(2):
        assert [m["id"] for m in await _receive(http, "src")] == [head]
        clock.advance(6)
    got = await _receive(http, "src")
    if not got:  # the move happened on this receive; the group's next is served on the next
        got = await _receive(http, "src")
    assert [m["id"] for m in got] == [nxt]
    [dead] = await _receive(http, "dlq")
    assert dead["group"] == "g" and dead["origin"]["id"] == head


async def test_redrive_to_another_queue_skips_messages_without_origin(
    http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    await _setup(http)
    assert (await _call(http, "PUT", "/v1/queues/other"))[0] == 201
    await _enqueue(http, "dlq", {"body": "plain"})
    status, task = await _call(http, "POST", "/v2/queues/dlq/redrive")
    assert status == 202
    done = await _wait_task(http, clock, task["id"])
    assert (done["moved"], done["skipped"]) == (0, 1)
    status, task = await _call(http, "POST", "/v2/queues/dlq/redrive", {"to_queue": "other"})
    done = await _wait_task(http, clock, task["id"])
    assert (done["moved"], done["skipped"]) == (1, 0)
    assert [m["body"] for m in await _receive(http, "other")] == ["plain"]


async def test_redrive_and_task_inputs_are_checked(http: aiohttp.ClientSession) -> None:
    await _setup(http)
    bodies: list[Any] = [
        {"to_queue": "nope"},
        {"to_queue": "dlq"},
        {"max_per_s": 0},
        {"max_per_s": 10_001},
        {"max_per_s": "5"},
        {"to_queue": 3},
        {"what": 1},
        [],
    ]
    for body in bodies:
        status, err = await _call(http, "POST", "/v2/queues/dlq/redrive", body)
        assert status in (404, 422), body
        assert "code" in err
    assert (await _call(http, "POST", "/v2/queues/nope/redrive"))[0] == 404
    assert (await _call(http, "GET", "/v2/tasks/xyz"))[0] == 422
    assert (await _call(http, "GET", "/v2/tasks/" + "0" * 32))[0] == 404


async def test_purge_removes_what_was_there_and_keeps_later_enqueues(
    http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    assert (await _call(http, "PUT", "/v1/queues/p"))[0] == 201
    await _enqueue(http, "p", *({"body": f"m{i}"} for i in range(50)))
    await _enqueue(http, "p", {"body": "g", "group": "x"}, {"body": "late", "delay_s": 2})
    status, task = await _call(http, "POST", "/v2/queues/p/purge")
    assert status == 202 and task["kind"] == "purge"
    clock.advance(0.01)
    [kept] = await _enqueue(http, "p", {"body": "after"})
    done = await _wait_task(http, clock, task["id"])
    assert done["state"] == "done" and done["moved"] == 52
    clock.advance(3)  # the delayed one would be due now: it was purged while waiting
    await asyncio.sleep(0.1)
    assert [m["id"] for m in await _receive(http, "p", 100)] == [kept]


async def test_dead_lettered_batch_item_is_failed_and_the_batch_completes(
    http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    exact = "/api/v1/batch/exact"
    await _setup(http, max_receive_count=1)
    _, opened = await _call(http, "POST", exact, {})
    batch = opened["batchId"]
    _, added = await _call(http, "POST", f"{exact}/items", {"batchId": batch, "items": 2})
    [block] = added["batchItemGroupIds"]
    items = [f"{batch}:{block['id']}:{i}" for i in range(2)]
    ok, poison = await _enqueue(
        http,
        "src",
        {"body": "ok", "attributes": {"dynaq.batch_item": items[0]}},
        {"body": "poison", "attributes": {"dynaq.batch_item": items[1]}},
    )
    assert (await _call(http, "POST", f"{exact}/close/{batch}"))[1] == {"isComplete": False}
    got = {m["id"] for m in await _receive(http, "src")}
    assert got == {ok, poison}
    assert (await _call(http, "POST", "/v2/queues/src/messages/delete", {"ids": [ok]}))[0] == 200
    clock.advance(6)
    assert await _receive(http, "src") == []  # the poison message moves, failing its item
    _, desc = await _call(http, "GET", f"{exact}/{batch}")
    assert desc["isComplete"] is True and desc["pending"] == 0
    assert desc["failedItems"] == [
        {"item": items[1], "queue": "src", "messageId": poison, "reason": "dead_lettered"}
    ]
    [dead] = await _receive(http, "dlq")
    assert dead["attributes"] == {"dynaq.batch_item": items[1]}


async def test_a_purge_window_whose_store_calls_never_answer_is_tried_again(
    node: Node, http: aiohttp.ClientSession, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lane whose store call has not answered in time is run again (deleting is
    idempotent), so one lost reply cannot hold the task for ever; the lanes of its
    window that did answer keep their counts (their messages are gone by the retry,
    which must not count them as none)."""
    # Long enough that the retried (real) call finishes in time on a loaded machine.
    monkeypatch.setattr(queue_purge, "_WINDOW_TIMEOUT_S", 3.0)
    assert (await _call(http, "PUT", "/v1/queues/stuck"))[0] == 201
    ids = await _enqueue(http, "stuck", *({"body": f"m{i}"} for i in range(10)))
    full = {ids_mod.lane_of(int(i)) for i in ids}
    # The silent lane: one holding no message, in the window of a lane that holds some.
    window = min(full) // queue_purge._PURGE_LANES_AT_ONCE * queue_purge._PURGE_LANES_AT_ONCE
    silent = next(
        lane
        for lane in range(window, window + queue_purge._PURGE_LANES_AT_ONCE)
        if lane not in full
    )
    real = node.store.delete_range
    calls: list[int] = []

    async def silent_once(start: bytes, end: bytes, chunk: int = 10_000) -> int:
        lane = ids_mod.lane_of(keys.message_id(start))
        calls.append(lane)
        if lane == silent and calls.count(lane) == 1:
            await asyncio.Event().wait()  # a reply that never comes
        return await real(start, end, chunk)

    monkeypatch.setattr(node.store, "delete_range", silent_once)
    status, task = await _call(http, "POST", "/v2/queues/stuck/purge")
    assert status == 202
    # Real time passes here, not the node's clock: a task left "running" on a clock
    # advanced for minutes would be taken for one whose node died.
    for _ in range(600):
        done = (await _call(http, "GET", f"/v2/tasks/{task['id']}"))[1]
        if done["state"] != "running":
            break
        await asyncio.sleep(0.05)
    assert done["state"] == "done" and done["moved"] == 10
    # Only the silent lane ran twice; the others of its window kept their answers.
    assert calls.count(silent) == 2
    assert len(calls) == ids_mod.LANES + 1
    assert (await _receive(http, "stuck")) == []


async def test_a_purge_cut_short_resumes_from_its_last_saved_progress(
    node: Node, http: aiohttp.ClientSession, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Progress is saved at most every second, so a node that dies mid-purge leaves a
    record behind the work done. The node that starts again resumes from that record
    (redoing idempotent deletes): everything enqueued before the purge goes, what came
    after stays, and the task ends ``done``. Stopping the tasks cancels them without a
    save, which leaves the store as a ``kill -9`` would."""
    real = node.store.delete_range
    calls = 0
    cut = asyncio.Event()

    async def dies_in_window_7(start: bytes, end: bytes, chunk: int = 10_000) -> int:
        nonlocal calls
        calls += 1
        clock.advance(0.02)  # ~0.64 s a window of 32 lanes: a save every other window
        if calls == 32 * 7 + 5:
            cut.set()
            await asyncio.Event().wait()  # the node dies here
        return await real(start, end, chunk)

    assert (await _call(http, "PUT", "/v1/queues/cut"))[0] == 201
    groups = [{"body": f"m{i}", "group": f"g{i}"} for i in range(60)]  # spread over lanes
    await _enqueue(http, "cut", *groups, {"body": "late", "delay_s": 2})
    monkeypatch.setattr(node.store, "delete_range", dies_in_window_7)
    status, task = await _call(http, "POST", "/v2/queues/cut/purge")
    assert status == 202
    await asyncio.wait_for(cut.wait(), 30)
    clock.advance(0.01)
    [kept] = await _enqueue(http, "cut", {"body": "after"})
    await node.queues.tasks.stop()  # cancelled: no save, as after kill -9
    item = await node.store.get(keys.task(task["id"]))
    assert item is not None
    left = json.loads(item.value)
    assert left["state"] == "running" and 0 < left["cursor"] < 32 * 7  # behind the work done
    monkeypatch.setattr(node.store, "delete_range", real)
    await node.queues.tasks.start()  # the node starting again
    done = await _wait_task(http, clock, task["id"])
    assert done["state"] == "done"
    clock.advance(3)  # the delayed one would be due now: it was purged first
    await asyncio.sleep(0.1)
    assert [m["id"] for m in await _receive(http, "cut", 100)] == [kept]


async def test_a_purged_message_in_flight_is_no_longer_counted_in_flight(
    http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    """A purge removes messages consumers still hold: they are gone, and the queue's
    in-flight figure (SQS's ApproximateNumberOfMessagesNotVisible) says so at once."""
    assert (await _call(http, "PUT", "/v1/queues/pf"))[0] == 201
    await _enqueue(http, "pf", *({"body": f"m{i}"} for i in range(10)))
    body = {"max_messages": 5, "visibility_timeout_s": 600}
    assert (
        len((await _call(http, "POST", "/v2/queues/pf/messages/receive", body))[1]["messages"]) == 5
    )
    assert (await _call(http, "GET", "/v2/queues/pf"))[1]["in_flight"] == 5
    status, task = await _call(http, "POST", "/v2/queues/pf/purge")
    assert status == 202
    assert (await _wait_task(http, clock, task["id"]))["state"] == "done"
    desc = (await _call(http, "GET", "/v2/queues/pf"))[1]
    assert desc["in_flight"] == 0 and desc["visible"] == 0, desc


async def test_a_redrive_to_a_missing_queue_names_it(http: aiohttp.ClientSession) -> None:
    assert (await _call(http, "PUT", "/v1/queues/dlq-r"))[0] == 201
    status, body = await _call(http, "POST", "/v2/queues/dlq-r/redrive", {"to_queue": "nope"})
    assert status == 404 and "'nope'" in body["error"], body
