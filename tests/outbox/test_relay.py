"""The outbox relay against a real PostgreSQL: schema, CLI, bad rows, gaps, leadership."""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest

from dynaq.core.membership import Member, MembershipView
from dynaq.node import Node
from dynaq.outbox import cli
from dynaq.outbox.events import LeaderAcquired, LeaderFenced, LeaderRevoked
from dynaq.outbox.relay import OutboxRelay, table_lane
from dynaq.outbox.schema import Queries, stash
from dynaq.testing.process import free_port
from tests.outbox.helpers import EventLog, RecordingMetrics, consume, fast_config, outbox_pool

asyncpg = pytest.importorskip("asyncpg")

if TYPE_CHECKING:
    from asyncpg import Pool


@pytest.fixture
async def db(pg_dsn: str) -> AsyncIterator[Pool]:
    async with outbox_pool(pg_dsn, min_size=1, max_size=8) as pool:
        yield pool


async def _topic(node: Node, topic: str = "events", queue: str = "q") -> None:
    await node.catalog.create_queue(queue)
    await node.catalog.create_topic(topic)
    await node.catalog.subscribe(topic, queue)


async def _wait(pred: object, timeout_s: float = 20.0) -> None:
    assert callable(pred)
    end = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < end, "condition not met in time"
        await asyncio.sleep(0.02)


async def _count(pool: Pool, where: str = "TRUE") -> int:
    return int(await pool.fetchval(f"SELECT count(*) FROM outbox WHERE {where}"))


def test_cli_init_db_creates_table_and_index(pg_dsn: str) -> None:
    parser = argparse.ArgumentParser(prog="dynaq")
    cli.add_parser(parser.add_subparsers(dest="command"))

    def run(*argv: str) -> int:
        return cli.run(parser.parse_args(["outbox", "init-db", "--dsn", pg_dsn, *argv]))

    assert run() == 0
    assert run() == 0  # idempotent
    assert run("--table", "x;drop") == 1  # not an identifier
    assert run("--table", "nosuchschema.box") == 1  # PostgreSQL's error, reported

    async def check() -> None:
        conn = await asyncpg.connect(pg_dsn)
        try:
            cols = await conn.fetch(
                "SELECT column_name, is_nullable, data_type FROM information_schema.columns "
                "WHERE table_name = 'outbox' ORDER BY ordinal_position"
            )
            got = {r[0]: (r[1], r[2]) for r in cols}
            assert got["id"] == ("NO", "bigint")
            assert got["topic"] == ("NO", "text")
            assert got["key"] == ("NO", "text")
            assert got["value"] == ("YES", "bytea")
            assert got["headers"][1] == "jsonb"
            assert got["leader_id"] == ("YES", "uuid")
            await conn.execute("SET enable_seqscan = off")
            plan = await conn.fetch(
                "EXPLAIN " + Queries.for_table("outbox").mark, uuid.uuid4(), 100
            )
            text = "\n".join(r[0] for r in plan)
            assert "outbox_pending_idx" in text, text
        finally:
            await conn.close()

    asyncio.run(check())


async def test_stash_is_transactional(db: Pool) -> None:
    async with db.acquire() as conn:
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await stash(conn, "t", "k", b"v", {"a": "b"})
                raise RuntimeError("business write failed")
        async with conn.transaction():
            rid = await stash(conn, "t", "k", None)
    rows = await db.fetch("SELECT id, topic, key, value, headers::text, leader_id FROM outbox")
    assert [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows] == [
        (rid, "t", "k", None, "{}", None)
    ]


async def test_rows_published_with_key_group_dedup_and_attributes(
    node: Node,
    db: Pool,
    pg_dsn: str,
) -> None:
    await _topic(node)
    async with db.acquire() as conn:
        rid = await stash(conn, "events", "order-1", b"created", {"h": "1"})
        nid = await stash(conn, "events", "order-2", None)
    relay = OutboxRelay(fast_config(pg_dsn), node.topics, node.view, RecordingMetrics())
    events = EventLog()
    relay.add_event_handler(events)
    await relay.start()
    try:
        await _wait(lambda: relay.relayed == 2)
        msgs = await node.queues.receive("q", 10)
    finally:
        await relay.stop()
    by_body = {m.body: m for m in msgs}
    assert set(by_body) == {b"created", b""}
    m = by_body[b"created"]
    assert m.group == "order-1"
    assert m.attributes == {"h": "1", "outbox_id": str(rid), "outbox_key": "order-1"}
    assert by_body[b""].attributes == {"outbox_id": str(nid), "outbox_key": "order-2"}
    assert await _count(db) == 0
    kinds = [type(e).__name__ for _, e in events.events if type(e).__name__ != "MeterRead"]
    assert kinds == ["LeaderAcquired", "LeaderRevoked"]


async def test_bad_rows_are_parked_and_do_not_block(
    node: Node,
    db: Pool,
    pg_dsn: str,
) -> None:
    await _topic(node)
    limit = node.queues.limits.max_message_bytes
    async with db.acquire() as conn:
        await stash(conn, "events", "a", b"a:0")
        ghost = await stash(conn, "no-such-topic", "a", b"a:1")
        big = await stash(conn, "events", "b", b"x" * (limit + 1))
        await stash(conn, "events", "a", b"a:2")
        await stash(conn, "events", "b", b"b:0")
    metrics = RecordingMetrics()
    # Let the service find the oversize row itself (no pre-check): the batch is split.
    relay = OutboxRelay(fast_config(pg_dsn), node.topics, node.view, metrics)
    await relay.start()
    try:
        seen = await consume(node.queues, "q", 3, consumers=2, timeout_s=20)
        await _wait(lambda: metrics.counters.get("outbox.outbox.parked.count") == 2)
    finally:
        await relay.stop()
    assert seen == {"a": [0, 2], "b": [0]}
    parked = await db.fetch("SELECT id, failure FROM outbox WHERE failure IS NOT NULL ORDER BY id")
    assert [r[0] for r in parked] == [ghost, big]
    assert "does not exist" in parked[0][1]
    assert "bytes" in parked[1][1]
    assert await _count(db, "failure IS NULL") == 0
    # Re-driving a parked row after fixing the cause: clear failure, it is published.
    await node.catalog.create_topic("no-such-topic")
    await node.catalog.subscribe("no-such-topic", "q")
    await db.execute("UPDATE outbox SET failure = NULL, leader_id = NULL WHERE id = $1", ghost)
    relay2 = OutboxRelay(
        fast_config(pg_dsn), node.topics, node.view, metrics, max_message_bytes=limit
    )
    await relay2.start()
    try:
        again = await consume(node.queues, "q", 1, consumers=1, timeout_s=20)
    finally:
        await relay2.stop()
    assert again == {"a": [1]}


async def test_gaps_from_long_and_rolled_back_transactions(
    node: Node,
    db: Pool,
    pg_dsn: str,
) -> None:
    """An open transaction holding a low id does not stall later rows; a rollback leaves no trace."""
    await _topic(node)
    relay = OutboxRelay(fast_config(pg_dsn), node.topics, node.view, RecordingMetrics())
    await relay.start()
    slow = await db.acquire()
    try:
        tx = slow.transaction()
        await tx.start()
        await stash(slow, "events", "slow", b"slow:0")  # lowest id, committed last
        async with db.acquire() as conn:
            with pytest.raises(RuntimeError):
                async with conn.transaction():
                    await stash(conn, "events", "gone", b"gone:0")
                    raise RuntimeError("rolled back")
            for i in range(5):
                await stash(conn, "events", "fast", f"fast:{i}".encode())
        first = await consume(node.queues, "q", 5, consumers=2, timeout_s=20)
        assert first == {"fast": [0, 1, 2, 3, 4]}
        await tx.commit()
        second = await consume(node.queues, "q", 1, consumers=1, timeout_s=20)
        assert second == {"slow": [0]}
    finally:
        await db.release(slow)
        await relay.stop()
    assert await _count(db) == 0


async def test_two_nodes_that_both_think_they_lead_never_both_relay(
    node: Node,
    db: Pool,
    pg_dsn: str,
) -> None:
    """Disagreeing rings: the advisory lock lets one relay; fencing its session hands over."""
    await _topic(node)
    cfg = fast_config(pg_dsn)
    views = [MembershipView(Member(f"n{i}", f"127.0.0.1:{i}")) for i in (1, 2)]
    relays = [OutboxRelay(cfg, node.topics, v, RecordingMetrics()) for v in views]
    logs = [EventLog(), EventLog()]
    for r, lg in zip(relays, logs, strict=True):
        r.add_event_handler(lg)
        await r.start()
    overlap = 0

    def watch() -> None:
        nonlocal overlap
        if all(r.is_leader for r in relays):
            overlap += 1

    try:
        await _wait(lambda: any(r.is_leader for r in relays))
        leader = next(i for i, r in enumerate(relays) if r.is_leader)
        async with db.acquire() as conn:
            for i in range(20):
                await stash(conn, "events", "k", f"k:{i}".encode())
        first = await consume(node.queues, "q", 20, consumers=2, on_batch=watch)
        # Fence the leader: kill its lock session in PostgreSQL.
        killed_at = time.monotonic()
        await db.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks "
            "WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid() "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        await _wait(lambda: logs[leader].of(LeaderFenced) != [])
        await _wait(lambda: any(t > killed_at for lg in logs for t, _ in lg.of(LeaderAcquired)))
        took = min(t for lg in logs for t, _ in lg.of(LeaderAcquired) if t > killed_at)
        async with db.acquire() as conn:
            for i in range(20, 40):
                await stash(conn, "events", "k", f"k:{i}".encode())
        second = await consume(node.queues, "q", 20, consumers=2, on_batch=watch)
        assert sum(r.is_leader for r in relays) == 1
    finally:
        for r in relays:
            await r.stop()
    assert first == {"k": list(range(20))}
    assert second == {"k": list(range(20, 40))}
    assert overlap == 0
    print(f"takeover after fencing: {took - killed_at:.3f} s")
    assert took - killed_at < 5.0


async def test_ring_change_revokes_and_hands_over(
    node: Node,
    db: Pool,
    pg_dsn: str,
) -> None:
    await _topic(node)
    cfg = fast_config(pg_dsn)
    a, b = Member("a", "127.0.0.1:1"), Member("b", "127.0.0.1:2")
    va, vb = MembershipView(a), MembershipView(b)
    ra = OutboxRelay(cfg, node.topics, va, RecordingMetrics())
    rb = OutboxRelay(cfg, node.topics, vb, RecordingMetrics())
    la, lb = EventLog(), EventLog()
    ra.add_event_handler(la)
    rb.add_event_handler(lb)
    await ra.start()
    await _wait(lambda: ra.is_leader)
    await rb.start()
    try:
        # Both now see {a, b}; the table's lane decides who leads.
        va.replace([a, b])
        vb.replace([a, b])
        owner = va.owner_of_lane(table_lane("outbox")).name
        winner, loser = (ra, rb) if owner == "a" else (rb, ra)
        await _wait(lambda: winner.is_leader and not loser.is_leader)
        if owner == "b":
            assert [type(e) for _, e in la.of(LeaderRevoked)] == [LeaderRevoked]
        async with db.acquire() as conn:
            for i in range(10):
                await stash(conn, "events", "k", f"k:{i}".encode())
        seen = await consume(node.queues, "q", 10, consumers=2)
    finally:
        await ra.stop()
        await rb.stop()
    assert seen == {"k": list(range(10))}
    assert winner.relayed == 10 and loser.relayed == 0


def test_bench_outbox_quick_reports_records_per_s(postgres: object) -> None:
    """``python -m bench outbox`` ends with a JSON line holding ``records_per_s``."""
    import json
    import os
    import subprocess
    import sys

    from dynaq.testing.process import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "outbox", "--quick", "--rows", "2000", "--no-durable"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["records_per_s"] > 0
    (run,) = result["runs"]
    assert run["relayed"] == run["queue_depth"] == 2000
    assert run["rows_left_in_table"] == 0
    # The same-run yardstick: the same rows marked and purged with the relay's SQL.
    floor = result["postgres_floor"]
    assert floor["purged"] == 2000 and floor["rows_left_in_table"] == 0
    assert floor["mark_statements"] >= 2 and floor["purge_statements"] >= 2  # 1000-row marks
    assert result["postgres_floor_rows_per_s"] == floor["rows_per_s"] > 0
    assert result["ratio_vs_postgres_floor"] > 0
    assert result["ratio_vs_postgres_floor"] == pytest.approx(
        result["records_per_s"] / result["postgres_floor_rows_per_s"], abs=0.001
    )
    # Each run carries its own floor (taken right after it) and ratio.
    assert run["postgres_floor_rows_per_s"] == floor["rows_per_s"]
    assert run["ratio_vs_postgres_floor"] == result["ratio_vs_postgres_floor"]


def test_row_to_message_mapping_and_bad_rows() -> None:
    from dynaq.errors import BadRecord
    from dynaq.outbox.schema import OutboxRecord, to_message

    lid = uuid.uuid4()
    rec = OutboxRecord(7, "t", "k" * 200, b"v", '{"a": "x", "n": 1, "o": {"b": true}}', lid)
    m = to_message(rec, "outbox", 10)
    assert m.body == b"v" and m.dedup_id == "outbox:7"
    assert m.group is not None and m.group.startswith("h:") and len(m.group) <= 128
    assert m.attributes == {
        "a": "x",
        "n": "1",
        "o": '{"b": true}',
        "outbox_id": "7",
        "outbox_key": "k" * 200,
    }
    with pytest.raises(BadRecord, match="limit is 0"):
        to_message(rec, "outbox", 0)
    with pytest.raises(BadRecord, match="JSON object"):
        to_message(OutboxRecord(8, "t", "k", None, "[1]", lid), "outbox", None)


def test_bench_outbox_rounds_report_medians_of_same_round_ratios(postgres: object) -> None:
    """``--rounds 2``: every (relay, floor) pair twice; the headline ratio is their median."""
    import json
    import os
    import statistics
    import subprocess
    import sys

    from dynaq.testing.process import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
    argv = ["--quick", "--rows", "1000", "--no-durable", "--rounds", "2"]
    done = subprocess.run(
        [sys.executable, "-m", "bench", "outbox", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    runs = result["runs"]
    assert [r["round"] for r in runs] == [1, 2]
    assert all(r["relayed"] == r["queue_depth"] == 1000 for r in runs)
    ratios = [r["ratio_vs_postgres_floor"] for r in runs]
    assert result["ratio_vs_postgres_floor"] == pytest.approx(statistics.median(ratios), abs=0.001)
    assert result["median_ratio_mark_batch_1000"] == result["ratio_vs_postgres_floor"]


async def test_rows_whose_headers_no_api_would_take_are_parked(
    node: Node,
    db: Pool,
    pg_dsn: str,
) -> None:
    """Forty headers, or one with an empty name: what every API refuses (422) a row
    must not publish either; it is parked, and the key's next row still goes."""
    await _topic(node)
    many = {f"h{i}": "v" for i in range(40)}
    async with db.acquire() as conn:
        crowded = await stash(conn, "events", "a", b"a:0", many)
        nameless = await stash(conn, "events", "b", b"b:0", {"": "e", "ok": "1"})
        await stash(conn, "events", "a", b"a:1")
        await stash(conn, "events", "b", b"b:1", {"ok": "1"})
    metrics = RecordingMetrics()
    relay = OutboxRelay(fast_config(pg_dsn), node.topics, node.view, metrics)
    await relay.start()
    try:
        seen = await consume(node.queues, "q", 2, consumers=1, timeout_s=20)
        await _wait(lambda: metrics.counters.get("outbox.outbox.parked.count") == 2)
    finally:
        await relay.stop()
    assert seen == {"a": [1], "b": [1]}
    parked = await db.fetch("SELECT id, failure FROM outbox WHERE failure IS NOT NULL ORDER BY id")
    assert [r[0] for r in parked] == [crowded, nameless]
    assert all("at most 32 attributes" in r[1] for r in parked)


async def test_an_unreachable_database_is_retried_ever_less_often(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    """A warning every io_error_backoff_ms for as long as the database is away buried
    every other line (7,200 an hour at 500 ms): the wait doubles, to 30 s."""
    dsn = f"postgresql://nobody@127.0.0.1:{free_port()}/none"
    relay = OutboxRelay(
        fast_config(dsn, io_error_backoff_ms=50), node.topics, node.view, RecordingMetrics()
    )
    with caplog.at_level("WARNING", logger="dynaq.outbox"):
        await relay.start()
        try:
            await asyncio.sleep(3.0)
        finally:
            await relay.stop()
    waits = [
        r.__dict__["retry_in_s"]
        for r in caplog.records
        if r.getMessage() == "outbox database error"
    ]
    # 0.05, 0.1, 0.2, 0.4, 0.8, 1.6 s: at most 6 tries in 3 s, not 60.
    assert 3 <= len(waits) <= 7, waits
    assert waits == sorted(waits) and waits[1] == 2 * waits[0]
