"""Cancelling a redrive task (``POST /v2/queues/{queue}/tasks/{task}/cancel``, SQS's
CancelMessageMoveTask) on one node with a manual clock: the task stops before its
next page, what it moved stays moved, and the rest stays in the dead-letter queue."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from dynaq.clock import ManualClock
from dynaq.core import keys
from dynaq.node import Node
from dynaq.services.queues.task_record import STALE_MS, TaskRecord


async def _call(
    http: aiohttp.ClientSession, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    async with http.request(method, path, json=body) as r:
        return r.status, await r.json()


async def _slow_redrive(http: aiohttp.ClientSession, n: int = 20) -> str:
    """A redrive of ``n`` plain messages from ``dlq`` to ``other`` at one a second:
    it moves one, then sleeps on the (manual) clock before the next page."""
    for q in ("dlq", "other"):
        assert (await _call(http, "PUT", f"/v1/queues/{q}"))[0] == 201
    msgs = [{"body": f"m{i}"} for i in range(n)]
    assert (await _call(http, "POST", "/v2/queues/dlq/messages", {"messages": msgs}))[0] == 200
    body = {"to_queue": "other", "max_per_s": 1}
    status, task = await _call(http, "POST", "/v2/queues/dlq/redrive", body)
    assert status == 202
    await _until(http, task["id"], lambda t: t["moved"] == 1)
    return str(task["id"])


async def _until(http: aiohttp.ClientSession, task: str, ok: Any) -> dict[str, Any]:
    for _ in range(400):
        status, rec = await _call(http, "GET", f"/v2/tasks/{task}")
        assert status == 200
        if ok(rec):
            return dict(rec)
        await asyncio.sleep(0.01)
    raise AssertionError(f"task never got there: {rec}")


async def _depth(http: aiohttp.ClientSession, queue: str) -> int:
    return int((await _call(http, "GET", f"/v2/queues/{queue}"))[1]["depth"])


async def test_a_cancel_stops_a_sleeping_redrive_at_once_and_keeps_what_it_moved(
    http: aiohttp.ClientSession,
) -> None:
    task = await _slow_redrive(http)
    # The task sleeps for its rate limit on a clock nobody advances: only the cancel
    # can wake it.
    status, shown = await _call(http, "POST", f"/v2/queues/dlq/tasks/{task}/cancel")
    assert status == 202 and shown["state"] == "cancelling" and shown["id"] == task
    done = await _until(http, task, lambda t: t["state"] != "cancelling")
    assert done["state"] == "cancelled" and done["moved"] == 1
    assert await _depth(http, "other") == 1 and await _depth(http, "dlq") == 19
    status, err = await _call(http, "POST", f"/v2/queues/dlq/tasks/{task}/cancel")
    assert status == 409 and err["code"] == "task_not_running" and "cancelled" in err["error"]


async def test_a_cancel_made_through_another_node_is_seen_before_the_next_page(
    http: aiohttp.ClientSession, node: Node, clock: ManualClock
) -> None:
    """Another node writes only the request (it cannot wake this node's sleep): the
    runner finds it before its next page."""
    task = await _slow_redrive(http)
    await node.store.put(keys.task_cancel(task), b"0")
    assert (await _call(http, "GET", f"/v2/tasks/{task}"))[1]["state"] == "cancelling"

    def ended(t: dict[str, Any]) -> bool:
        # Whenever its rate limit's sleep began, this ends it: no second page moves.
        clock.advance(1.5)
        return bool(t["state"] != "cancelling")

    done = await _until(http, task, ended)
    assert done["state"] == "cancelled" and done["moved"] == 1
    assert await _depth(http, "dlq") == 19


async def test_a_task_whose_node_is_gone_is_marked_cancelled_by_the_node_asked(
    http: aiohttp.ClientSession, node: Node, clock: ManualClock
) -> None:
    """The record is this node's, as one left by a crash long ago: the cancel ends it,
    and the node's resume of its tasks (as on its next start) leaves it ended."""
    assert (await _call(http, "PUT", "/v1/queues/dlq"))[0] == 201
    assert (await _call(http, "POST", "/v2/queues/dlq/messages", {"messages": [{"body": "x"}]}))[
        0
    ] == 200
    now, me = clock.wall_ms(), node.view.me.name
    rec = TaskRecord("ab" * 16, "redrive", "dlq", "running", 7, 0, me, now, now, "dlq2", 1)
    await node.store.put(keys.task(rec.id), rec.encode())
    clock.advance((STALE_MS + 1000) / 1000)
    assert (await _call(http, "GET", f"/v2/tasks/{rec.id}"))[1]["state"] == "interrupted"
    status, shown = await _call(http, "POST", f"/v2/queues/dlq/tasks/{rec.id}/cancel")
    assert status == 202 and shown["state"] == "cancelled" and shown["moved"] == 7
    assert (await _call(http, "GET", f"/v2/tasks/{rec.id}"))[1]["state"] == "cancelled"
    await node.queues.tasks.start()  # resumes this node's running tasks: none now
    await asyncio.sleep(0.05)
    assert (await _call(http, "GET", f"/v2/tasks/{rec.id}"))[1]["state"] == "cancelled"
    assert await _depth(http, "dlq") == 1  # nothing was moved (there is no dlq2 either)


async def test_what_cannot_be_cancelled_is_refused_precisely(
    http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    for q in ("dlq", "other"):
        assert (await _call(http, "PUT", f"/v1/queues/{q}"))[0] == 201
    status, purge = await _call(http, "POST", "/v2/queues/dlq/purge")
    assert status == 202
    status, err = await _call(http, "POST", f"/v2/queues/dlq/tasks/{purge['id']}/cancel")
    assert status == 409 and err["code"] == "task_not_running" and "purge" in err["error"]
    status, done = await _call(http, "POST", "/v2/queues/dlq/redrive")  # empty: ends at once
    await _until(http, done["id"], lambda t: t["state"] == "done")
    status, err = await _call(http, "POST", f"/v2/queues/dlq/tasks/{done['id']}/cancel")
    assert status == 409 and err["code"] == "task_not_running"
    # A task of another queue, an unknown id, an unknown queue, a malformed id.
    status, err = await _call(http, "POST", f"/v2/queues/other/tasks/{done['id']}/cancel")
    assert status == 404 and err["code"] == "not_found"
    status, err = await _call(http, "POST", f"/v2/queues/dlq/tasks/{'0' * 32}/cancel")
    assert status == 404 and err["code"] == "not_found"
    status, err = await _call(http, "POST", f"/v2/queues/nope/tasks/{done['id']}/cancel")
    assert status == 404 and err["code"] == "queue_not_found"
    status, err = await _call(http, "POST", "/v2/queues/dlq/tasks/xyz/cancel")
    assert status == 422 and err["code"] == "invalid_input"


async def test_a_cancel_asked_before_its_node_died_reads_interrupted_then_can_end_it(
    http: aiohttp.ClientSession, node: Node, clock: ManualClock
) -> None:
    """The request was written, then the task's node died: the task must not read
    ``cancelling`` for ever; once its record is stale it reads ``interrupted``, and a
    cancel then ends it."""
    assert (await _call(http, "PUT", "/v1/queues/dlq"))[0] == 201
    now = clock.wall_ms()
    rec = TaskRecord("cd" * 16, "redrive", "dlq", "running", 3, 0, "dead-node", now, now)
    await node.store.put(keys.task(rec.id), rec.encode())
    status, shown = await _call(http, "POST", f"/v2/queues/dlq/tasks/{rec.id}/cancel")
    assert status == 202 and shown["state"] == "cancelling"  # its node may still act on it
    clock.advance((STALE_MS + 1000) / 1000)
    assert (await _call(http, "GET", f"/v2/tasks/{rec.id}"))[1]["state"] == "interrupted"
    status, shown = await _call(http, "POST", f"/v2/queues/dlq/tasks/{rec.id}/cancel")
    assert status == 202 and shown["state"] == "cancelled" and shown["moved"] == 3
