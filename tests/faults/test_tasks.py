"""Redrive tasks under kill -9: every message in exactly one queue, exact counts, and
a cancel that survives the crash of the node running the task.

A redrive moves each page of a dead-letter queue in one store batch, and the
task's progress record is written in that same batch. The node is killed from
inside right after a page's batch (``DYNAQ_TESTING_CRASH_AT=redrive_page:<n>``:
the window where a record written on its own would be lost, so a resumed task
would count that page nowhere) and from outside at a random moment, and
restarted each time (the task resumes from its record). Then the redrive is
cancelled and the node killed at once: the task ends ``cancelled`` whether the
node acted on the cancel before the kill (the usual case: the request wakes the
task in the same process) or the restarted node reads the durable cancel before
its next page. Judged on what is stored afterwards: each body in exactly one of
the two queues, ``moved`` equal to what the target holds, nothing skipped.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dynaq.client import AsyncClient, RetryPolicy, TaskInfo
from dynaq.testing import run_node
from dynaq.testing.runners import NodeServer
from tests.faults.helpers import stored_bodies

CRASH_ENV = "DYNAQ_TESTING_CRASH_AT"
MESSAGES = 1_500
RATE = 100  # a page of 100 a second


async def _until(c: AsyncClient, task: str, ok: Callable[[TaskInfo], bool], what: str) -> TaskInfo:
    deadline = time.monotonic() + 60
    while True:
        info = await c.task(task)
        if ok(info):
            return info
        assert time.monotonic() < deadline, f"{what}: task never got there: {info}"
        await asyncio.sleep(0.05)


async def _crash_inside(node: NodeServer, step: str) -> None:
    """Restart with a crash point and wait until the node has died at it."""
    node.process.env[CRASH_ENV] = step
    try:
        await node.start(timeout_s=60)
    except RuntimeError:
        if node.alive():  # not the crash asked for
            raise
    deadline = time.monotonic() + 30
    while node.alive():
        assert time.monotonic() < deadline, f"the node never reached {step}"
        await asyncio.sleep(0.05)
    node.process.env.pop(CRASH_ENV, None)


@pytest.mark.timeout(300)  # ~25 s alone; five restarts on a loaded machine
async def test_a_redrive_keeps_exact_counts_and_its_cancel_through_kill9(tmp_path: Path) -> None:
    rng = random.Random(18)
    bodies = [f"m{i}" for i in range(MESSAGES)]
    async with run_node(directory=tmp_path) as node:
        policy = RetryPolicy(attempts=60, max_delay_s=0.5, deadline_s=60)
        async with AsyncClient(node.url, timeout_s=10, retry=policy) as c:
            for q in ("dlq", "other"):
                await c.create_queue(q)
            for i in range(0, MESSAGES, 500):
                await c.enqueue("dlq", bodies[i : i + 500])
            task = (await c.redrive("dlq", to_queue="other", max_per_s=RATE)).id

            # 1. From outside, at a random moment after the first page.
            await _until(c, task, lambda t: t.moved >= 100, "first page")
            await asyncio.sleep(rng.uniform(0.0, 1.0))
            await node.kill()
            # 2. From inside, right after a page's batch: the resumed task's second
            # page, then (restarted again) its first.
            await _crash_inside(node, "redrive_page:2")
            await _crash_inside(node, "redrive_page:1")
            await node.start(timeout_s=60)
            shown = await _until(c, task, lambda t: t.moved >= 600, "after the crashes")
            assert shown.state == "running" and shown.skipped == 0, shown

            # 3. Cancel, and kill the node before its task can act on it.
            cancelling = await c.cancel_task("dlq", task)
            assert cancelling.state == "cancelling", cancelling
            await node.kill()
            await node.start(timeout_s=60)
            ended = await _until(c, task, lambda t: t.finished, "after the cancel")

            dlq, other = await stored_bodies(c, "dlq"), await stored_bodies(c, "other")
    assert ended.state == "cancelled", ended
    both = dlq + other
    assert sorted(both) == sorted(bodies), (
        f"lost {sorted(set(bodies) - set(both))[:5]}, "
        f"twice {[b for b, n in both.items() if n > 1][:5]}"
    )
    # Exact through every crash: the record counts what the target holds.
    assert ended.moved == sum(other.values()), (ended, sum(other.values()))
    assert ended.skipped == 0
    # The cancel stopped it short of the end.
    assert 0 < sum(dlq.values()) <= MESSAGES - 600, sum(dlq.values())
