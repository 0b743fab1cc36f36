"""Faults on a node of two workers (``http.workers = 2``) on the embedded store:
kill -9 of one worker under load, kill -9 of the whole node (supervisor and
workers) under load.

Producers and consumers run the recorded workload through the node's one port
throughout; the history checker judges the whole run (nothing acknowledged
lost, group order, dedup, ids never reused, duplicates only where a fault
explains them).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from pathlib import Path

import pytest

from dynaq.testing import History, Workload, run_node, run_workload
from dynaq.testing.history import Fault
from dynaq.testing.runners import NodeServer
from tests.cluster.workers import kill9, pids_of, store_writer_pid, wait_workers
from tests.faults.helpers import COMPLETION_TOPIC, assert_verdict, server_errors

pytestmark = pytest.mark.timeout(400)

VT_S = 3.0


def _workload(node: NodeServer, messages: int, duration_s: float, seed: int) -> Workload:
    return Workload(
        endpoints=[node.url],
        messages=messages,
        duration_s=duration_s,
        visibility_timeout_s=VT_S,
        request_timeout_s=10.0,
        drain_max_s=90.0,
        seed=seed,
        completion_topic=COMPLETION_TOPIC,
        delete_by_receipt=True,
    )


async def test_kill9_of_one_worker_loses_nothing(tmp_path: Path) -> None:
    kills = 4
    rng = random.Random(7)
    async with run_node(
        directory=tmp_path, http_workers=2, batches_completion_topic=COMPLETION_TOPIC
    ) as node:
        await wait_workers(node, 2)

        async def faults(h: History) -> None:
            for _ in range(kills):
                await asyncio.sleep(rng.uniform(2.0, 3.5))
                pids = await pids_of(node)
                victim = rng.choice(pids)
                f = h.fault("kill -9", f"worker pid {victim}")
                await asyncio.to_thread(kill9, victim)
                # The supervisor starts it again; the ring of workers converges.
                await wait_workers(node, 2, timeout_s=90)
                f.ended = h.now()

        t0 = time.monotonic()
        h = await run_workload(_workload(node, 4_000, 25.0, seed=3), faults)
        wall = time.monotonic() - t0
    assert sum(f.kind == "kill -9" for f in h.faults) == kills
    # A request in progress on a killed worker fails (connection reset): never a 500.
    assert not server_errors(h), server_errors(h)
    await assert_verdict("2 workers: kill -9 of one worker", h, wall, artifacts=tmp_path)


async def test_sigterm_of_one_worker_in_turn_loses_nothing(tmp_path: Path) -> None:
    """Graceful stops of one worker at a time under load: each hands its in-flight
    messages over and leaves; the supervisor starts it again."""
    stops = 3
    rng = random.Random(9)
    async with run_node(
        directory=tmp_path, http_workers=2, batches_completion_topic=COMPLETION_TOPIC
    ) as node:
        await wait_workers(node, 2)

        async def faults(h: History) -> None:
            for i in range(stops):
                await asyncio.sleep(rng.uniform(2.0, 3.5))
                pids = sorted(await pids_of(node))
                victim = pids[i % len(pids)]
                # The worker hands its in-flight state to the others and its
                # replacement takes it back: the stop explains no early redelivery.
                f = h.fault("SIGTERM", f"worker pid {victim}", explains_redelivery=False)
                await asyncio.to_thread(os.kill, victim, signal.SIGTERM)
                await _wait_gone(victim, within_s=60)
                await wait_workers(node, 2, timeout_s=90)
                f.ended = h.now()

        t0 = time.monotonic()
        h = await run_workload(_workload(node, 3_000, 20.0, seed=5), faults)
        wall = time.monotonic() - t0
    assert sum(f.kind == "SIGTERM" for f in h.faults) == stops
    assert not server_errors(h), server_errors(h)
    await assert_verdict("2 workers: SIGTERM of a worker in turn", h, wall, artifacts=tmp_path)


async def test_kill9_of_the_whole_node_loses_nothing(tmp_path: Path) -> None:
    kills = 3
    rng = random.Random(8)
    async with run_node(
        directory=tmp_path, http_workers=2, batches_completion_topic=COMPLETION_TOPIC
    ) as node:
        await wait_workers(node, 2)

        async def faults(h: History) -> None:
            for _ in range(kills):
                await asyncio.sleep(rng.uniform(2.0, 3.5))
                f = await _kill_whole_node(node, h)
                await wait_workers(node, 2, timeout_s=90)
                f.ended = h.now()

        t0 = time.monotonic()
        h = await run_workload(_workload(node, 4_000, 25.0, seed=4), faults)
        wall = time.monotonic() - t0
    assert sum(f.kind == "kill -9" for f in h.faults) == kills
    await assert_verdict("2 workers: kill -9 of the whole node", h, wall, artifacts=tmp_path)


async def test_workers_sharing_a_writer_process_lose_nothing(tmp_path: Path) -> None:
    """``embedded.writer = "process"``: the workers commit through one writer process
    the supervisor runs. Under load: kill -9 of that writer (each worker fails what
    it had not answered, 503, and connects to the next one), of a worker, and of
    the whole node (supervisor, workers and writer), restarted on its data.

    The receive byte budget is set so low (100 bytes: two or three of these
    messages) that every receive stops on it: what a receive leaves behind, in a
    scan or among expired in-flight messages, is checked under the same faults."""
    rng = random.Random(10)
    env = {"DYNAQ_EMBEDDED_WRITER": "process", "DYNAQ_HTTP_MAX_RECEIVE_BYTES": "100"}
    async with run_node(
        directory=tmp_path, env=env, http_workers=2, batches_completion_topic=COMPLETION_TOPIC
    ) as node:
        await wait_workers(node, 2)
        writer_deaths: list[int] = []

        async def faults(h: History) -> None:
            for step in ("writer", "worker", "writer", "node"):
                await asyncio.sleep(rng.uniform(2.0, 3.0))
                if step == "writer":
                    pid = await asyncio.to_thread(store_writer_pid, node)
                    assert pid is not None, "no store writer process under the supervisor"
                    f = h.fault("kill -9 writer", str(pid))
                    await asyncio.to_thread(kill9, pid)
                    writer_deaths.append(pid)
                elif step == "worker":
                    victim = rng.choice(await pids_of(node))
                    f = h.fault("kill -9", f"worker pid {victim}")
                    await asyncio.to_thread(kill9, victim)
                else:
                    f = await _kill_whole_node(node, h)
                await wait_workers(node, 2, timeout_s=90)
                f.ended = h.now()

        t0 = time.monotonic()
        h = await run_workload(_workload(node, 3_000, 22.0, seed=5), faults)
        wall = time.monotonic() - t0
        # The writer was a new process after each of its deaths.
        assert await asyncio.to_thread(store_writer_pid, node) not in (None, *writer_deaths)
    assert len(writer_deaths) == 2
    assert not server_errors(h), server_errors(h)
    await assert_verdict("2 workers, one writer process: kill -9", h, wall, artifacts=tmp_path)


async def _kill_whole_node(node: NodeServer, h: History) -> Fault:
    """kill -9 of the supervisor (its workers, and a writer process, die with it), then
    start the node again on its data; the fault, recorded in ``h``."""
    workers = await pids_of(node)
    f = h.fault("kill -9", f"{node.name} (supervisor and everything under it)")
    await node.kill()
    for pid in workers:
        await _wait_gone(pid)
    await node.start(timeout_s=90)
    return f


async def _wait_gone(pid: int, within_s: float = 10.0) -> None:
    """Wait until process ``pid`` has exited (a worker follows its supervisor)."""
    deadline = time.monotonic() + within_s
    while await asyncio.to_thread(Path(f"/proc/{pid}").exists):
        status = await asyncio.to_thread(_state, pid)
        if status == "Z":  # exited, not yet reaped (its parent is gone: init will)
            return
        assert time.monotonic() < deadline, f"worker {pid} outlived its supervisor"
        await asyncio.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1]
    except (OSError, IndexError):
        return ""
