"""The examples run as their docstrings say: ``dynaq worker examples.processors.pipeline:graph``
from the repository root, and the PostgreSQL sink with its effect exactly once across
crashes (against the suite's real PostgreSQL)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dynaq.client import Client
from dynaq.errors import StreamNotFound
from dynaq.testing.process import NodeProcess
from tests.processors.harness import LIVE, ROOT, Worker, entries, wait_for


def _worker(target: str, env: dict[str, str], log: Path, *args: str) -> Worker:
    full = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
    full.update(env)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dynaq", "worker", target, *args],
            env=full,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    worker = Worker(proc, log)
    LIVE.append(worker)  # killed after the test, whatever happens in it
    return worker


@pytest.mark.parametrize("how", ["env", "option"])
def test_pipeline_example(node: NodeProcess, tmp_path: Path, how: str) -> None:
    env = {"DYNAQ_ENDPOINT": node.url} if how == "env" else {}
    args = () if how == "env" else ("--endpoint", node.url)
    with Client(node.url) as c:
        first = c.stream_size("ex-in") if "ex-in" in {s.name for s in c.list_streams()} else 0
        w = _worker("examples.processors.pipeline:graph", env, tmp_path / "w.log", *args)
        wait_for(lambda: "ex-in" in {s.name for s in c.list_streams()}, 20, "ex-in declared")
        ns = list(range(first + 1, first + 31))
        c.append("ex-in", [{"n": n} for n in ns])

        def done() -> bool:
            # The worker declares its output streams as it starts: one may not be
            # there yet when the input is.
            try:
                return len(entries(c, "ex-out")) + len(entries(c, "ex-errors")) >= first + 30
            except StreamNotFound:
                return False

        wait_for(done, 30, "the example's outputs")
        assert w.terminate() == 0, w.log()
        out = [e for e in entries(c, "ex-out") if e["n"] in ns]
        errors = [e for e in entries(c, "ex-errors") if e["n"] in ns]
    assert [e["n"] for e in out] == [n for n in ns if n % 7]
    assert all(e["double"] == 2 * e["n"] for e in out)
    assert all(set(e) == {"n", "double", "_cues"} for e in out)  # plain members, plus meta
    assert [e["n"] for e in errors] == [n for n in ns if n % 7 == 0]
    assert all(e["error"] == f"{e['n']} is a multiple of 7" for e in errors)
    log = w.log_path.read_text()
    assert '"msg": "worker started"' in log and '"msg": "worker stopped"' in log


def test_worker_refuses_a_bad_target(tmp_path: Path) -> None:
    for target in ("nonexistent_module:graph", "examples.processors.pipeline:double", "nocolon"):
        w = _worker(target, {}, tmp_path / "bad.log")
        assert w.wait(20) == 2, w.log()


async def _pg_totals(dsn: str) -> tuple[int, int, int]:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow("SELECT orders, amount FROM order_totals WHERE id = 1")
        hashes = await conn.fetchval("SELECT count(*) FROM cues_deliveries")
    finally:
        await conn.close()
    assert row is not None
    return int(row["orders"]), int(row["amount"]), int(hashes)


async def test_postgres_sink_effect_exactly_once_across_crashes(
    node: NodeProcess, pg_dsn: str, tmp_path: Path
) -> None:
    # Workers and polling block: they run in a thread, off the test's event loop.
    orders, amount, hashes, crashes, expected = await asyncio.to_thread(
        _pg_scenario, node, pg_dsn, tmp_path
    )
    assert crashes == 4
    assert (orders, amount, hashes) == expected


def _pg_scenario(
    node: NodeProcess, pg_dsn: str, tmp_path: Path
) -> tuple[int, int, int, int, tuple[int, int, int]]:
    env = {"DYNAQ_ENDPOINT": node.url, "DYNAQ_EXAMPLE_PG_DSN": pg_dsn}
    target = "examples.processors.postgres_sink:graph"
    amounts = [(i * 37) % 101 + 1 for i in range(24)]
    with Client(node.url) as c:
        w = _worker(target, env, tmp_path / "pg0.log", "--lease-ttl", "0.4")
        wait_for(lambda: "pg-orders" in {s.name for s in c.list_streams()}, 20, "pg-orders")
        assert w.terminate() == 0, w.log()
        c.append("pg-orders", [{"order": f"o-{i}", "amount": a} for i, a in enumerate(amounts)])
        # Killed after the effect committed but before the processor recorded the
        # delivery: the retry has the same hash, and the transaction skips it.
        crashes = 0
        for k, nth in enumerate((2, 3, 1, 4)):
            crashing = _worker(
                target,
                {**env, "DYNAQ_FAULT_POINT": f"fn.done:{nth}"},
                tmp_path / f"pg{k + 1}.log",
                "--lease-ttl",
                "0.4",
            )
            rc = crashing.wait(30)
            assert rc == -9, crashing.log()
            crashes += 1
        last = _worker(target, env, tmp_path / "pg-last.log", "--lease-ttl", "0.4")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if (
                asyncio.run(_pg_totals(pg_dsn))[0] >= len(amounts)
                and c.stream_size("_cues.pg.totals") > 0
            ):
                break
            time.sleep(0.1)
        assert last.terminate() == 0, last.log()
    orders, amount, hashes = asyncio.run(_pg_totals(pg_dsn))
    return orders, amount, hashes, crashes, (len(amounts), sum(amounts), len(amounts))


def test_a_running_worker_reports_each_processor_to_the_node(
    node: NodeProcess, tmp_path: Path
) -> None:
    """``GET /v2/processors`` shows the example's processor: running while the worker
    runs (positions, lag, handled errors), ``stopped`` after a graceful stop."""
    env = {"DYNAQ_ENDPOINT": node.url}
    with Client(node.url) as c:
        w = _worker(
            "examples.processors.pipeline:graph",
            env,
            tmp_path / "w.log",
            "--report-interval",
            "0.3",
        )
        wait_for(lambda: "ex-in" in {s.name for s in c.list_streams()}, 20, "ex-in declared")
        before = c.stream_size("ex-in")
        c.append("ex-in", [{"n": n} for n in range(1, 15)])  # 7 and 14 are handled errors

        def caught_up() -> bool:
            got = {p["name"]: p for p in c.list_processors()}.get("pipeline.double")
            return (
                got is not None
                and got["state"] == "running"
                and got["inputs"][0]["position"] == before + 14
            )

        wait_for(caught_up, 30, "a report with every input taken")
        rep = c.describe_processor("pipeline.double")
        assert rep["alive"] is True and rep["lag"] == 0
        assert rep["kind"] == "transform" and rep["strategy"] == "exactly_once"
        assert rep["inputs"] == [
            {"name": "ex-in", "kind": "stream", "position": before + 14, "lag": 0}
        ]
        assert rep["outputs"] == ["ex-out"] and rep["handled_errors"] >= 2
        assert rep["delivered"] >= 14 and rep["last_delivery_ms"] is not None
        assert w.terminate() == 0, w.log()
        final = c.describe_processor("pipeline.double")
        assert final["state"] == "stopped" and final["alive"] is False
