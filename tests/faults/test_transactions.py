"""Transactions under kill -9, on one node (LMDB) and in a ring on Cassandra (and on
Riak, marked slow): every transaction is all or nothing.

Processors receive from ``in`` and commit transactions that delete 1-3
received messages and enqueue 1-2 outputs (dedup id = transaction and output
number) into ``out`` and ``audit``, while the node is killed with SIGKILL: at
random moments from outside, and at each named step of the transaction path
from inside (``DYNAQ_TESTING_CRASH_AT``, :class:`~dynaq.services.queues.crash_point.CrashPoint`).
Every attempt is recorded with what the node answered (committed, refused,
or unknown: the connection died and retries ran out).

The check, on what is stored: every transaction's outputs are all present or
all absent; a transaction with its outputs present has its inputs gone; one
answered 200 is applied, one refused (409) is not; no output is stored twice;
and after a drain without faults, every input was consumed by exactly one
applied transaction (exactly once, none lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dynaq.client import AsyncClient, NewMessage, RetryPolicy, TxnDelete, TxnEnqueue
from dynaq.errors import DynaqError, StaleReceipts
from dynaq.testing import Cluster, run_cluster, run_node
from dynaq.testing.runners import NodeServer
from dynaq.testing.servers.cassandra import CassandraServer
from dynaq.testing.servers.riak import RiakServer
from tests.faults.helpers import stored_bodies
from tests.fixtures.cassandra import new_keyspace
from tests.fixtures.riak import new_prefix

FEED_BATCH = 30
FEED_EVERY_S = 0.1
CRASH_ENV = "DYNAQ_TESTING_CRASH_AT"


@dataclass
class Attempt:
    """One transaction sent: its inputs and outputs (bodies), and the answer."""

    inputs: list[str]
    outputs: dict[str, list[str]]  # queue -> bodies
    answer: str = "unknown"  # committed | replayed | refused | unknown


@dataclass
class Run:
    attempts: list[Attempt] = field(default_factory=list)
    restarts: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    feed_errors: int = 0
    faults_over: asyncio.Event = field(default_factory=asyncio.Event)


async def _feeder(c: AsyncClient, run: Run) -> None:
    """Enqueue inputs while the faults go on; a batch is sent again (same dedup ids)
    until it is acknowledged, so every input is stored once. A batch still
    unacknowledged when the faults end is not counted (it may or may not be stored:
    the drain consumes it either way)."""
    n = 0
    while not run.faults_over.is_set():
        bodies = [f"i{n + k}" for k in range(FEED_BATCH)]
        n += FEED_BATCH
        while not run.faults_over.is_set():
            try:
                await c.enqueue("in", [NewMessage(b, dedup_id=b) for b in bodies])
            except DynaqError:
                run.feed_errors += 1
                await asyncio.sleep(0.1)
            else:
                run.inputs += bodies
                break
        await asyncio.sleep(FEED_EVERY_S)


async def _processor(
    c: AsyncClient,
    run: Run,
    rng: random.Random,
    name: str,
    stop: asyncio.Event,
    via: AsyncClient | None = None,
) -> None:
    """Receive from ``c``, group into transactions, commit them through ``via`` (default
    ``c``); record every attempt. Stops between transactions once ``stop`` is set."""
    via = via or c
    n = 0
    while not stop.is_set():
        try:
            got = await c.receive("in", 6, visibility_timeout_s=20)
        except DynaqError:
            await asyncio.sleep(0.1)
            continue
        if not got:
            await asyncio.sleep(0.05)
            continue
        i = 0
        while i < len(got):
            take = got[i : i + rng.randint(1, 3)]
            i += len(take)
            n += 1
            tid = f"{name}-{n}"
            inputs = [m.body.decode() for m in take]
            outputs: dict[str, list[str]] = {"out": [], "audit": []}
            enqueues = []
            for j in range(rng.randint(1, 2)):
                queue = "out" if j == 0 else "audit"
                body = f"{tid}:{j}:{'+'.join(inputs)}"
                outputs[queue].append(body)
                enqueues.append(TxnEnqueue(queue, body, dedup_id=f"{tid}:{j}"))
            attempt = Attempt(inputs, outputs)
            run.attempts.append(attempt)
            try:
                result = await via.transact([TxnDelete.of("in", m) for m in take], enqueues)
                attempt.answer = "replayed" if result.replayed else "committed"
            except StaleReceipts:
                attempt.answer = "refused"
            except DynaqError:
                attempt.answer = "unknown"


async def _restart(node: NodeServer, run: Run, crash_at: str | None) -> None:
    if node.alive():
        await node.kill()
    node.process.env.pop(CRASH_ENV, None)
    if crash_at is not None:
        node.process.env[CRASH_ENV] = crash_at
    run.restarts.append(crash_at or "sigkill")
    try:
        await node.start(timeout_s=60)
    except RuntimeError:
        # With a crash point the node may reach it (and die) before it answers
        # /health: that is the fault asked for, not a failed start.
        if crash_at is None or node.alive():
            raise


async def _faults(node: NodeServer, run: Run, rng: random.Random) -> None:
    """Kill -9 from outside at random moments, and from inside at each step."""
    plan: list[str | None] = [None, "held:7", None, "prepared:5", "written:6", None, "written:2"]
    await asyncio.sleep(0.5)
    for crash_at in plan:
        if crash_at is None:
            await asyncio.sleep(rng.uniform(0.3, 1.5))
            await _restart(node, run, None)
            continue
        await _restart(node, run, crash_at)
        deadline = time.monotonic() + 30
        while node.alive():  # it dies at the step by itself
            assert time.monotonic() < deadline, (
                f"never crashed at {crash_at}: {Counter(a.answer for a in run.attempts)}, "
                f"{len(run.inputs)} inputs fed, {run.feed_errors} feed errors"
            )
            await asyncio.sleep(0.05)
        run.restarts[-1] += " (died)"
    await _restart(node, run, None)


def _applied(a: Attempt, outs: Counter[str]) -> bool | None:
    """Whether ``a``'s outputs are stored: True, False, or None if only some are."""
    present = [outs[b] > 0 for bodies in a.outputs.values() for b in bodies]
    if all(present):
        return True
    return False if not any(present) else None


@pytest.mark.timeout(300)  # ~10 s alone; eight restarts and a drain on a loaded machine
async def test_kill9_during_transactions_leaves_each_all_or_nothing(tmp_path: Path) -> None:
    rng = random.Random(14)
    run = Run()
    async with run_node(directory=tmp_path) as node:
        policy = RetryPolicy(attempts=40, max_delay_s=0.5, deadline_s=20)
        async with AsyncClient(node.url, timeout_s=10, retry=policy) as c:
            for q in ("in", "out", "audit"):
                await c.create_queue(q)
            feeder = asyncio.create_task(_feeder(c, run))
            stop = asyncio.Event()
            workers = [
                asyncio.create_task(_processor(c, run, random.Random(k), f"p{k}", stop))
                for k in range(2)
            ]
            try:
                await _faults(node, run, rng)
            finally:
                run.faults_over.set()
                stop.set()
                await asyncio.gather(feeder, *workers)
            # the check the brief names, on the state the faults left (nothing running)
            ins = await stored_bodies(c, "in")
            outs = await stored_bodies(c, "out") + await stored_bodies(c, "audit")
            _check_all_or_nothing(run, ins, outs, drained=False)
            # then drain without faults: every input ends consumed exactly once
            stop = asyncio.Event()
            workers = [
                asyncio.create_task(_processor(c, run, random.Random(k), f"d{k}", stop))
                for k in range(2)
            ]
            try:
                deadline = time.monotonic() + 90
                while await stored_bodies(c, "in"):
                    assert time.monotonic() < deadline, "in never drained"
                    await asyncio.sleep(0.5)
            finally:
                stop.set()
                await asyncio.gather(*workers)
            ins = await stored_bodies(c, "in")
            outs = await stored_bodies(c, "out") + await stored_bodies(c, "audit")
    _check_all_or_nothing(run, ins, outs, drained=True)
    answers = Counter(a.answer for a in run.attempts)
    print(f"restarts {run.restarts}; attempts {len(run.attempts)}: {dict(answers)}")
    assert sum("(died)" in r for r in run.restarts) == 4, run.restarts
    assert answers["committed"] > 50 and answers["refused"] > 0


def _check_all_or_nothing(run: Run, ins: Counter[str], outs: Counter[str], drained: bool) -> None:
    dupes = [b for b, n in outs.items() if n > 1]
    assert not dupes, f"outputs stored twice: {dupes[:5]}"
    consumed: Counter[str] = Counter()
    for a in run.attempts:
        applied = _applied(a, outs)
        assert applied is not None, f"half-applied transaction {a}"
        if a.answer in ("committed", "replayed"):
            assert applied, f"answered {a.answer} but not applied: {a}"
        if a.answer == "refused":
            assert not applied, f"refused but applied: {a}"
        if applied:
            gone = [i for i in a.inputs if ins[i]]
            assert not gone, f"applied, but inputs {gone} still stored: {a}"
            consumed.update(a.inputs)
    twice = [i for i, n in consumed.items() if n > 1]
    assert not twice, f"inputs consumed by two applied transactions: {twice[:5]}"
    for body in run.inputs:
        if drained:
            assert ins[body] == 0 and consumed[body] == 1, (body, ins[body], consumed[body])
        else:
            # an input no applied transaction consumed is still stored (receivable)
            assert consumed[body] == 1 or ins[body] == 1, (body, ins[body], consumed[body])


# a ring on Cassandra ------------------------------------------------------------

NAMES = ["dynaq-1", "dynaq-2", "dynaq-3"]


async def _crash_at(ring: Cluster, name: str, crash_at: str | None, run: Run) -> None:
    """Restart ``name`` (kill -9, rejoin) with ``crash_at`` set (or cleared)."""
    node = ring.node(name)
    if node.alive():
        await ring.kill(name)
    await ring.wait_converged([n for n in NAMES if n != name], timeout_s=30)
    node.proc.env.pop(CRASH_ENV, None)
    if crash_at is not None:
        node.proc.env[CRASH_ENV] = crash_at
    run.restarts.append(f"{name} {crash_at or 'sigkill'}")
    try:
        await ring.start(name, timeout_s=60)
        await ring.wait_converged(NAMES, timeout_s=30)
    except (RuntimeError, AssertionError, TimeoutError):
        # With a crash point the node may die at it before it is healthy or before
        # the ring has converged: the fault asked for, not a failed start.
        if crash_at is None or node.alive():
            raise


async def _ring_faults(ring: Cluster, run: Run) -> None:
    """dynaq-3 coordinates transactions whose inputs other nodes served: it dies after
    the remote holds, then after the write; then dynaq-2, which serves inputs, is killed
    from outside mid-run."""
    await asyncio.sleep(2)
    for crash_at in ("held:4", "written:4"):
        await _crash_at(ring, "dynaq-3", crash_at, run)
        deadline = time.monotonic() + 60
        while ring.node("dynaq-3").alive():
            assert time.monotonic() < deadline, f"dynaq-3 never crashed at {crash_at}"
            await asyncio.sleep(0.05)
        run.restarts[-1] += " (died)"
        await _crash_at(ring, "dynaq-3", None, run)
        await asyncio.sleep(1)
    await _crash_at(ring, "dynaq-2", None, run)
    await asyncio.sleep(2)


@pytest.mark.timeout(300)
async def test_kill9_in_a_cassandra_ring_leaves_each_transaction_all_or_nothing(
    tmp_path: Path, cassandra: CassandraServer
) -> None:
    """Inputs are served by one node and their transactions go through the next, so
    every receipt is checked and claimed remotely (forwarded, signed)."""
    async with run_cluster(
        3,
        "cassandra",
        cassandra_hosts=[cassandra.host],
        keyspace=new_keyspace(),
        directory=tmp_path,
        timeout_s=90,
    ) as ring:
        await _ring_run(ring)


# Soak, not CI: on a loaded machine a Riak write of unknown outcome can land after
# its inputs' 30 s hold (finished by the journal replay), so a retry is refused
# though the first applied: the gap the README states for Riak. Run with -m soak.
@pytest.mark.soak
@pytest.mark.timeout(400)
async def test_kill9_in_a_riak_ring_leaves_each_transaction_all_or_nothing(
    tmp_path: Path, riak: RiakServer
) -> None:
    """The same on one Riak KV, where a multi-key write goes through the store's journal."""
    async with run_cluster(
        3,
        "riak",
        riak_http=[riak.http],
        keyspace=new_prefix(),
        directory=tmp_path,
        timeout_s=90,
        env={"DYNAQ_RIAK_N_VAL": "1"},
    ) as ring:
        await _ring_run(ring)


async def _ring_run(ring: Cluster) -> None:
    run = Run()
    policy = RetryPolicy(attempts=60, max_delay_s=0.5, deadline_s=40)
    async with contextlib.AsyncExitStack() as stack:
        nodes = [
            await stack.enter_async_context(AsyncClient(ring.node(n).url, 10, retry=policy))
            for n in NAMES
        ]
        anywhere = await stack.enter_async_context(AsyncClient(ring.urls, 10, retry=policy))
        for q in ("in", "out", "audit"):
            await anywhere.create_queue(q)
        await asyncio.sleep(1.5)  # config sync: every node knows the queues
        feeder = asyncio.create_task(_feeder(anywhere, run))
        stop = asyncio.Event()

        def processors(prefix: str) -> list[asyncio.Task[None]]:
            return [
                asyncio.create_task(
                    _processor(nodes[k], run, random.Random(k), f"{prefix}{k}", stop, via)
                )
                for k in range(3)
                for via in [nodes[(k + 1) % 3]]
            ]

        workers = processors("r")
        try:
            await _ring_faults(ring, run)
        finally:
            run.faults_over.set()
            stop.set()
            await asyncio.gather(feeder, *workers)
        ins = await stored_bodies(anywhere, "in")
        outs = await stored_bodies(anywhere, "out") + await stored_bodies(anywhere, "audit")
        _check_all_or_nothing(run, ins, outs, drained=False)
        stop = asyncio.Event()
        workers = processors("d")
        try:
            # Held inputs wait out their hold; a Riak ring on a loaded machine drains
            # at a few hundred transactions a second at best.
            deadline = time.monotonic() + 240
            while left := await stored_bodies(anywhere, "in"):
                assert time.monotonic() < deadline, f"in never drained: {len(left)} left"
                await asyncio.sleep(0.5)
        finally:
            stop.set()
            await asyncio.gather(*workers)
        ins = await stored_bodies(anywhere, "in")
        outs = await stored_bodies(anywhere, "out") + await stored_bodies(anywhere, "audit")
    _check_all_or_nothing(run, ins, outs, drained=True)
    answers = Counter(a.answer for a in run.attempts)
    print(f"restarts {run.restarts}; attempts {len(run.attempts)}: {dict(answers)}")
    assert sum("(died)" in r for r in run.restarts) == 2, run.restarts
    assert answers["committed"] > 20
