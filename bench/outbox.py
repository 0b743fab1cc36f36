"""Outbox relay throughput: rows relayed end to end, PostgreSQL table → dynaq topic.

``python -m bench outbox [--rows N] [--keys K] [--hot-share F] [--mark-batch B] [--max-in-flight M] [--no-durable] [--rounds R]``

A throwaway PostgreSQL cluster (Debian's packages, ``dynaq/testing/servers/postgres.py``;
``fsync`` on unless ``--no-durable``) gets an outbox table pre-filled with N
rows over K keys (``COPY``; 100-byte values). An in-process dynaq node (LMDB
with fsync'd group commits) has the topic with one subscribed queue. The
relay starts and the clock runs until every row is published into the queue
and purged from the table. Reported: ``records_per_s`` = N / that time, plus
the relay's CPU share and the PostgreSQL server's CPU.

Runs the given config and, for comparison, goharvest's defaults (mark batch
100) when a different mark batch was asked for; each run is followed by its
own floor (below), and carries its ratio. ``--rounds R`` repeats the whole
sequence R times; the top-level figures are then medians over the rounds
(the ratio's of the same-round ratios).

The same-run yardstick (issue 18): the same N rows, in a fresh table of the
same cluster, marked (leased) and purged with the relay's own SQL, with the
same mark batch and in-flight bound, and nothing published
(:mod:`bench._outbox_floor`). Reported as ``postgres_floor_rows_per_s`` and
``ratio_vs_postgres_floor`` = ``records_per_s`` / that (target: ≥ 0.5), at the
top level for the given config and in each entry of ``runs`` for its own.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench._outbox_floor import mark_and_purge
from bench.common import Deadline, Timer, process_cpu_s, progress, rate

VALUE = b"v" * 100


def _pg_cpu_s(server: Any) -> float:
    """CPU seconds used so far by every process of the PostgreSQL cluster (Linux)."""
    try:
        out = subprocess.run(
            ["pgrep", "-u", "postgres"], capture_output=True, text=True, check=False
        ).stdout
    except OSError:
        return 0.0
    return sum(process_cpu_s(int(pid)) for pid in out.split())


async def _fresh_outbox(args: argparse.Namespace, server: Any, tag: str) -> tuple[str, Any]:
    """A new database whose outbox table holds the N rows; its DSN and a connection."""
    import asyncpg

    from dynaq.outbox.schema import init_db

    db = f"bench_{tag}_{time.time_ns()}"
    admin = await asyncpg.connect(server.dsn)
    await admin.execute(f'CREATE DATABASE "{db}"')
    await admin.close()
    dsn = server.dsn.rsplit("/", 1)[0] + "/" + db
    conn = await asyncpg.connect(dsn)
    await init_db(conn)
    every = round(1 / args.hot_share) if args.hot_share > 0 else 0
    rows = [
        ("events", "hot" if every and i % every == 0 else f"k{i % args.keys}", VALUE, "{}")
        for i in range(args.rows)
    ]
    await conn.copy_records_to_table(
        "outbox", records=rows, columns=["topic", "key", "value", "headers"]
    )
    await conn.execute("VACUUM ANALYZE outbox")
    return dsn, conn


async def _floor(args: argparse.Namespace, server: Any, mark_batch: int) -> dict[str, Any]:
    """The same rows marked and purged with the relay's SQL, nothing published."""
    import asyncpg

    dsn, conn = await _fresh_outbox(args, server, f"floor_{mark_batch}")
    purge_conn = await asyncpg.connect(dsn)
    try:
        pg0 = _pg_cpu_s(server)
        result = await mark_and_purge(
            conn,
            purge_conn,
            args.rows,
            mark_batch,
            args.max_in_flight,
            Deadline(args.max_seconds),
        )
        result["postgres_cpu_s"] = round(_pg_cpu_s(server) - pg0, 2)
        result["rows_left_in_table"] = int(await conn.fetchval("SELECT count(*) FROM outbox"))
    finally:
        await purge_conn.close()
        await conn.close()
    progress(f"postgres floor, mark_batch={mark_batch}: {result['rows_per_s']} rows/s")
    return result


async def _run(args: argparse.Namespace, server: Any, mark_batch: int) -> dict[str, Any]:
    from dynaq.config import OutboxConfig, config_from_mapping
    from dynaq.metrics import NullMetrics
    from dynaq.node import Node
    from dynaq.outbox.relay import OutboxRelay

    dsn, conn = await _fresh_outbox(args, server, str(mark_batch))
    data = Path(tempfile.mkdtemp(prefix="dynaq-bench-outbox-"))
    node = Node(
        config_from_mapping(
            {
                "node": {"name": "bench"},
                "data": {"dir": str(data)},
                "http": {"port": 0},
                "stats": {"type": "none"},
                "embedded": {"map_size_mb": 4096},
            }
        )
    )
    await node.start()
    try:
        await node.catalog.create_queue("q")
        await node.catalog.create_topic("events")
        await node.catalog.subscribe("events", "q")
        cfg = OutboxConfig(
            dsn=dsn,
            mark_batch=mark_batch,
            max_in_flight=args.max_in_flight,
            metrics_interval_s=1.0,
            **(
                {}
                if args.max_publish_batch is None
                else {"max_publish_batch": args.max_publish_batch}
            ),
        )
        relay = OutboxRelay(
            cfg,
            node.topics,
            node.view,
            NullMetrics(),
            max_message_bytes=node.queues.limits.max_message_bytes,
        )
        deadline = Deadline(args.max_seconds)
        pg0 = _pg_cpu_s(server)
        with Timer() as t:
            await relay.start()
            while relay.relayed < args.rows and not deadline.expired():  # noqa: ASYNC110 - a poll of a counter
                await asyncio.sleep(0.01)
            elapsed = t.elapsed_s
        pg_cpu = _pg_cpu_s(server) - pg0
        await relay.stop()
        left = int(await conn.fetchval("SELECT count(*) FROM outbox"))
        depth = await node.queues.depth(await node.catalog.queue("q"))
    finally:
        await node.stop()
        await conn.close()
        shutil.rmtree(data, ignore_errors=True)
    result = {
        "mark_batch": mark_batch,
        "max_in_flight": args.max_in_flight,
        "rows": args.rows,
        "keys": args.keys,
        "relayed": relay.relayed,
        "rows_left_in_table": left,
        "queue_depth": depth,
        "seconds": round(elapsed, 3),
        "records_per_s": round(rate(relay.relayed, elapsed), 1),
        "relay_process_cpu_s": round(t.cpu_s, 2),
        "postgres_cpu_s": round(pg_cpu, 2),
    }
    progress(f"mark_batch={mark_batch}: {result['records_per_s']} records/s")
    return result


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench outbox")
    p.add_argument("--rows", type=int, default=50_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--mark-batch", type=int, default=1000)
    p.add_argument("--max-in-flight", type=int, default=1000)
    p.add_argument(
        "--hot-share",
        type=float,
        default=0.0,
        help="this share of the rows (every 1/F-th) have one key, 'hot' (a skewed outbox)",
    )
    p.add_argument(
        "--max-publish-batch",
        type=int,
        default=None,
        help="the relay's outbox.max_publish_batch (default: the config's)",
    )
    p.add_argument("--max-seconds", type=float, default=120.0)
    p.add_argument("--no-durable", action="store_true", help="PostgreSQL with fsync off")
    p.add_argument("--quick", action="store_true", help="10k rows, one run")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="repeat every (relay, floor) pair this often; report medians (a shared box's "
        "load changes within seconds)",
    )
    return p.parse_args(argv)


def main(argv: list[str]) -> dict[str, Any]:
    """Run the scenario; the dispatcher prints the returned dict as the last JSON line."""
    from dynaq.cli.node import loop_factory, tune_process
    from dynaq.config import HttpConfig
    from dynaq.testing.servers import postgres as pg_server

    args = _parse(argv)
    # The relay runs in this process: under a node's interpreter settings (GC
    # thresholds, frozen imports, GIL switch interval) and on its default event
    # loop, as `dynaq server` runs it. The floor runs under the same settings.
    tune_process()
    factory = loop_factory(HttpConfig().event_loop)

    def run_async(coro: Any) -> Any:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coro)

    if args.quick:
        args.rows = min(args.rows, 10_000)
    progress("starting PostgreSQL")
    server = pg_server.start_postgres(durable=not args.no_durable)
    batches = [args.mark_batch]
    if not args.quick and args.mark_batch != 100:
        batches.append(100)
    runs: list[dict[str, Any]] = []
    floors: list[dict[str, Any]] = []
    try:
        for round_no in range(1, max(1, args.rounds) + 1):
            for mark_batch in batches:
                # Each relay run is followed at once by its floor, so the two see
                # the same load on a shared machine.
                run = run_async(_run(args, server, mark_batch))
                floor = run_async(_floor(args, server, mark_batch))
                run["round"] = round_no
                run["postgres_floor_rows_per_s"] = floor["rows_per_s"]
                run["ratio_vs_postgres_floor"] = _ratio(run["records_per_s"], floor["rows_per_s"])
                runs.append(run)
                floors.append(floor)
    finally:
        server.stop()
    main_runs = [r for r in runs if r["mark_batch"] == args.mark_batch]
    summary = {
        "scenario": "outbox",
        "durable_postgres": not args.no_durable,
        "records_per_s": _median(r["records_per_s"] for r in main_runs),
        "postgres_floor_rows_per_s": _median(r["postgres_floor_rows_per_s"] for r in main_runs),
        "ratio_vs_postgres_floor": _median(r["ratio_vs_postgres_floor"] for r in main_runs),
        "postgres_floor": floors[0],
        "runs": runs,
    }
    if len(main_runs) > 1:
        # Medians of each column over the rounds (the ratio's is of the same-round ratios).
        for mark_batch in batches:
            mine = [r for r in runs if r["mark_batch"] == mark_batch]
            summary[f"median_ratio_mark_batch_{mark_batch}"] = _median(
                r["ratio_vs_postgres_floor"] for r in mine
            )
    return summary


def _median(values: Iterable[float]) -> float:
    return round(statistics.median(values), 3)


def _ratio(records_per_s: float, floor_rows_per_s: float) -> float:
    return round(records_per_s / floor_rows_per_s, 3) if floor_rows_per_s > 0 else 0.0
