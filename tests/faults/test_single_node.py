"""Faults on one node on the embedded LMDB store: kill -9 under load, clock steps
at restart and on the running process.

The node is a real process restarted on the same port and data dir after each
fault; producers and consumers run the recorded workload throughout, and the
history checker judges the whole run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from pathlib import Path

import aiohttp

from dynaq.testing import History, Workload, run_node, run_workload
from dynaq.testing.runners import NodeServer
from tests.faults.helpers import (
    COMPLETION_TOPIC,
    assert_verdict,
    faketime_env,
    server_errors,
    step_clock,
    stepped_clock_env,
)

VT_S = 3.0


def _workload(
    node: NodeServer,
    messages: int,
    duration_s: float,
    seed: int,
    *,
    events: bool = True,
    by_receipt: bool = False,
) -> Workload:
    return Workload(
        endpoints=[node.url],
        messages=messages,
        duration_s=duration_s,
        visibility_timeout_s=VT_S,
        request_timeout_s=5.0,
        drain_max_s=60.0,
        seed=seed,
        completion_topic=COMPLETION_TOPIC if events else None,
        delete_by_receipt=by_receipt,
    )


async def _restart(node: NodeServer, h: History, kind: str, env: dict[str, str]) -> None:
    """kill -9 and start again on the same data dir with ``env`` (a clock offset, or none)."""
    f = h.fault(kind, f"{node.name} {env.get('FAKETIME', '')}".strip())
    await node.kill()
    for key in ("LD_PRELOAD", "FAKETIME"):
        node.process.env.pop(key, None)
    node.process.env.update(env)
    await node.start(timeout_s=60)
    f.ended = h.now()


async def _node_clock_offset_s(url: str) -> float:
    """How far the node's wall clock is from ours: a batch's ``createdAt`` is its time."""
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/api/v1/batch/exact") as r:
            batch_id = (await r.json())["batchId"]
        async with http.get(f"{url}/api/v1/batch/exact/{batch_id}") as r:
            created_ms = (await r.json())["createdAt"]
    return float(created_ms) / 1000 - time.time()


async def _wait_for_node_clock(url: str, offset: str, within_s: float = 15.0) -> float:
    """Wait until the node's wall clock reads ``offset`` (whole hours) from ours;
    return how long that took. Fails the test if the step never shows."""
    want = int(offset.removesuffix("h"))
    t0 = time.monotonic()
    while True:
        got = await _node_clock_offset_s(url)
        if round(got / 3600) == want:
            return time.monotonic() - t0
        assert time.monotonic() - t0 < within_s, f"clock step {offset} never showed: {got} s"
        await asyncio.sleep(0.25)


async def test_kill9_loop_loses_nothing(tmp_path: Path) -> None:
    kills = 5
    rng = random.Random(11)
    async with run_node(directory=tmp_path, batches_completion_topic=COMPLETION_TOPIC) as node:

        async def faults(h: History) -> None:
            for _ in range(kills):
                await asyncio.sleep(rng.uniform(1.5, 3.0))
                await _restart(node, h, "kill -9", {})

        t0 = time.monotonic()
        # Deletes by receipt: a receipt from before a crash must still delete its
        # delivery, and one whose message was served again must not.
        h = await run_workload(_workload(node, 4_000, 25.0, seed=1, by_receipt=True), faults)
        wall = time.monotonic() - t0
    assert sum(f.kind == "kill -9" for f in h.faults) == kills
    await assert_verdict("single node: kill -9 loop", h, wall, artifacts=tmp_path, kills=kills)


def _writer_child(node: NodeServer) -> int | None:
    """The pid of the node's store writer process (``embedded.writer = "process"``)."""
    proc = node.process.proc
    if proc is None:
        return None
    pid = proc.pid
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        with contextlib.suppress(OSError):
            if b"embedded_writer_child" in Path(f"/proc/{child}/cmdline").read_bytes():
                return int(child)
    return None


async def test_a_writer_process_killed_or_taken_down_with_its_node_loses_nothing(
    tmp_path: Path,
) -> None:
    """``embedded.writer = "process"``: kill -9 of the writer process alone (the node
    fails its unanswered writes 503 and starts another) and of the whole node."""
    rng = random.Random(12)
    env = {"DYNAQ_EMBEDDED_WRITER": "process"}
    async with run_node(
        directory=tmp_path, env=env, batches_completion_topic=COMPLETION_TOPIC
    ) as node:

        async def faults(h: History) -> None:
            for i in range(4):
                await asyncio.sleep(rng.uniform(1.5, 3.0))
                if i % 2:
                    await _restart(node, h, "kill -9", env)
                    continue
                pid = await asyncio.to_thread(_writer_child, node)
                assert pid is not None, "no writer process under the node"
                f = h.fault("kill -9 writer", str(pid))
                os.kill(pid, signal.SIGKILL)
                f.ended = h.now()

        t0 = time.monotonic()
        h = await run_workload(_workload(node, 3_000, 25.0, seed=2, by_receipt=True), faults)
        wall = time.monotonic() - t0
    assert sum(f.kind == "kill -9 writer" for f in h.faults) == 2
    await assert_verdict("single node, writer process: kill -9", h, wall, artifacts=tmp_path)


async def test_restarts_with_the_clock_stepped_back_and_ahead_lose_nothing(
    tmp_path: Path,
) -> None:
    """Restarted with its clock 1 h behind (twice: the second start must know the ids the
    first drew), then 1 h ahead, then on time again (1 h behind its newest ids).

    Completion events are counted. This run found a completion published just
    before a kill -9 but not yet marked announced published again at the restart:
    the topic's dedup record (in the embedded store's time bucket of the earlier
    clock) was not found by a node restarted an hour off (1-2 batches a run). The
    event and a published marker are now one store batch
    (tests/services/test_completion_once.py)."""
    steps = ["-1h", "-1h", "+1h", ""]
    envs = [await asyncio.to_thread(faketime_env, o) if o else {} for o in steps]
    async with run_node(directory=tmp_path, batches_completion_topic=COMPLETION_TOPIC) as node:

        async def faults(h: History) -> None:
            for offset, env in zip(steps, envs, strict=True):
                await asyncio.sleep(2.5)
                await _restart(node, h, f"kill -9, clock {offset or 'reset'}", env)

        t0 = time.monotonic()
        h = await run_workload(_workload(node, 4_000, 20.0, seed=2), faults)
        wall = time.monotonic() - t0
    await assert_verdict("single node: clock steps", h, wall, artifacts=tmp_path, steps=steps)


async def test_a_running_node_whose_clock_steps_back_and_ahead_loses_nothing(
    tmp_path: Path,
) -> None:
    """The wall clock of the running node is stepped 1 h back, forward to true time,
    1 h ahead, and back to true time, 2.5 s apart, under load: no restart, and the
    monotonic clock runs on undisturbed (as under a real NTP step)."""
    control = tmp_path / "faketime.rc"
    env = await asyncio.to_thread(stepped_clock_env, control)
    steps = ["-1h", "+0", "+1h", "+0"]
    async with run_node(
        directory=tmp_path, env=env, batches_completion_topic=COMPLETION_TOPIC
    ) as node:
        seen: list[float] = []
        """How long each step took to show in the node's clock (seconds)."""

        async def faults(h: History) -> None:
            for offset in steps:
                await asyncio.sleep(2.5)
                # A redelivery near a step is not excused: no lock may be lost.
                f = h.fault(
                    f"clock step to {offset} (running)", node.name, explains_redelivery=False
                )
                await asyncio.to_thread(step_clock, control, offset)
                seen.append(await _wait_for_node_clock(node.url, offset))
                f.ended = h.now()

        t0 = time.monotonic()
        h = await run_workload(_workload(node, 4_000, 15.0, seed=3), faults)
        wall = time.monotonic() - t0
        assert node.alive(), node.log()[-2000:]
    assert server_errors(h) == {}, h.responses
    await assert_verdict(
        "single node: clock stepped while running",
        h,
        wall,
        artifacts=tmp_path,
        steps=steps,
        step_shown_after_s=[round(x, 1) for x in seen],
    )
