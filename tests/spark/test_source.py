"""The PySpark data source against real dynaq node processes and a real local[2] SparkSession."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dynaq.client import Client
from dynaq.testing.process import NodeProcess, node_process

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dynaq_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    p = node_process(tmp_path_factory.mktemp("spark-node"), "spark-1").start()
    try:
        yield p
    finally:
        p.terminate()


def _call(url: str, method: str, body: Any = None) -> None:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status < 300


def _queue(node: NodeProcess, name: str, min_partitions: int = 1, vt: int = 30) -> None:
    _call(f"{node.url}/v1/queues/{name}", "PUT")
    settings = {"min_partitions": min_partitions, "visibility_timeout": vt}
    _call(f"{node.url}/v1/queues/{name}", "PATCH", settings)


def _workers(node: NodeProcess) -> int:
    """How many workers the node runs: each cuts its lanes into the queue's partitions."""
    with Client(node.url) as c:
        return c.health().workers


def _fill(node: NodeProcess, queue: str, n: int) -> list[int]:
    with Client(node.url) as c:
        return c.enqueue(
            queue,
            [
                {"body": f"message {i}".encode(), "attributes": {"i": str(i)} if i % 2 else None}
                for i in range(n)
            ],
        )


def test_batch_read_is_a_snapshot_with_one_spark_partition_per_dynaq_partition(
    spark: Any, dynaq_node: NodeProcess
) -> None:
    _queue(dynaq_node, "snap", min_partitions=3)
    ids = _fill(dynaq_node, "snap", 5000)
    df = (
        spark.read.format("dynaq").option("endpoint", dynaq_node.url).option("queue", "snap").load()
    )
    with Client(dynaq_node.url) as c:
        parts = c.partitions("snap")
    assert len(parts) == 3 * _workers(dynaq_node)
    assert df.rdd.getNumPartitions() == len(parts)
    rows = df.collect()
    assert sorted(r.id for r in rows) == sorted(ids)
    by_id = {r.id: r for r in rows}
    first = by_id[ids[1]]
    assert bytes(first.body) == b"message 1" and first.attributes == {"i": "1"}
    assert by_id[ids[0]].attributes is None
    assert first.node == "spark-1" and first.enqueued_at is not None
    for r in rows:  # each row comes from the partition whose range holds its id
        p = parts[r.partition]
        assert p.from_id <= r.id <= p.to_id
    # A snapshot neither locks nor deletes: every message can still be received.
    with Client(dynaq_node.url) as c:
        assert len(c.receive("snap", 1000)) == 1000


PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


@pytest.fixture
def pushdown_on(spark: Any) -> Iterator[Any]:
    """The session with filter pushdown for Python data sources on, for one test."""
    spark.conf.set(PUSHDOWN_CONF, "true")
    try:
        yield spark
    finally:
        spark.conf.unset(PUSHDOWN_CONF)


@pytest.fixture(scope="module")
def filtered_queue(dynaq_node: NodeProcess) -> tuple[list[int], list[Any]]:
    """A queue of 3000 messages over 4 partitions: its ids (in enqueue order) and partitions."""
    _queue(dynaq_node, "prune", min_partitions=4)
    ids = _fill(dynaq_node, "prune", 3000)
    with Client(dynaq_node.url) as c:
        parts = c.partitions("prune")
    assert len(parts) == 4 * _workers(dynaq_node)
    return ids, parts


def _filter_cases(
    df: Any, enqueued: list[int], parts: list[Any]
) -> dict[str, tuple[Any, list[int]]]:
    """Filters on ``df`` (name -> (filtered DataFrame, the sorted ids it must return))."""
    ids = sorted(enqueued)
    p = next(p for p in parts if any(p.from_id <= i <= p.to_id for i in ids))
    inside = [i for i in ids if p.from_id <= i <= p.to_id]
    lo, hi = inside[0], inside[min(len(inside) - 1, 10)]
    return {
        "range in one partition": (
            df.filter((df.id >= lo) & (df.id <= hi)),
            [i for i in ids if lo <= i <= hi],
        ),
        "=": (df.filter(df.id == ids[5]), [ids[5]]),
        "IN": (df.filter(df.id.isin(ids[0], ids[-1])), [ids[0], ids[-1]]),
        "> and <": (
            df.filter((df.id > ids[100]) & (df.id < ids[200])),
            ids[101:200],
        ),
        "no id can match": (df.filter(df.id < 0), []),
        "another column": (df.filter(df.body == b"message 7"), [enqueued[7]]),
    }


def _read(spark: Any, node: NodeProcess, **options: str) -> Any:
    reader = spark.read.format("dynaq").option("endpoint", node.url).option("queue", "prune")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _results(df: Any, ids: list[int], parts: list[Any]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for name, (filtered, want) in _filter_cases(df, ids, parts).items():
        got = sorted(r.id for r in filtered.select("id").collect())
        assert got == want, name
        out[name] = got
    return out


def test_a_default_session_reads_with_any_filter_and_spark_applies_them(
    spark: Any, dynaq_node: NodeProcess, filtered_queue: tuple[list[int], list[Any]]
) -> None:
    """Spark's defaults (pushdown off), as the README's example runs: the reader
    takes no filters, every partition is read, Spark filters; same rows as pushdown."""
    ids, parts = filtered_queue
    assert spark.conf.get(PUSHDOWN_CONF) == "false"  # the fixture is a default session
    df = _read(spark, dynaq_node)
    _results(df, ids, parts)
    lo, hi = min(ids), max(ids)
    assert df.filter((df.id >= lo) & (df.id <= hi)).rdd.getNumPartitions() == len(parts)
    # Asking for pushdown while the session has it off is pyspark's own clear error.
    with pytest.raises(Exception, match=f"DATA_SOURCE_PUSHDOWN_DISABLED|{PUSHDOWN_CONF}"):
        asked = _read(spark, dynaq_node, pushdown="true")
        asked.filter(asked.id == ids[0]).collect()
    with pytest.raises(Exception, match="must be true or false"):
        _read(spark, dynaq_node, pushdown="yes").collect()


def test_with_pushdown_id_filters_prune_partitions_and_give_the_same_rows(
    pushdown_on: Any, dynaq_node: NodeProcess, filtered_queue: tuple[list[int], list[Any]]
) -> None:
    spark = pushdown_on
    ids, parts = filtered_queue
    df = _read(spark, dynaq_node, pushdown="true")
    pushed = _results(df, ids, parts)
    # ids within one partition's range: only that partition is read.
    narrow, _ = _filter_cases(df, ids, parts)["range in one partition"]
    assert narrow.rdd.getNumPartitions() == 1
    assert df.filter(df.id == ids[5]).rdd.getNumPartitions() == 1
    assert df.filter(df.id < 0).rdd.getNumPartitions() == 1  # none planned: pyspark reads one
    # The conf on without the option: the plain reader, every partition, the same rows.
    plain = _read(spark, dynaq_node)
    assert plain.filter(plain.id == ids[5]).rdd.getNumPartitions() == len(parts)
    assert _results(plain, ids, parts) == pushed


def test_streaming_available_now_exactly_once_into_parquet_then_restart_reads_nothing(
    spark: Any, dynaq_node: NodeProcess, tmp_path: Path
) -> None:
    _queue(dynaq_node, "stream", vt=120)
    ids = _fill(dynaq_node, "stream", 3000)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def run() -> None:
        q = (
            spark.readStream.format("dynaq")
            .option("endpoint", dynaq_node.url)
            .option("queue", "stream")
            .option("maxRowsPerTrigger", "1000")
            .load()
            .writeStream.format("parquet")
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start(out)
        )
        q.awaitTermination(120)
        assert q.exception() is None

    run()
    got = [r.id for r in spark.read.parquet(out).select("id").collect()]
    assert len(got) == len(set(got)) == 3000 and set(got) == set(ids)
    with Client(dynaq_node.url) as c:  # committed batches were deleted from the queue
        assert c.receive("stream", 100) == []
    run()  # restart from the checkpoint: nothing new
    assert spark.read.parquet(out).count() == 3000


def test_streaming_query_killed_mid_batch_loses_nothing(
    spark: Any, dynaq_node: NodeProcess, tmp_path: Path
) -> None:
    vt = 3
    _queue(dynaq_node, "crash", vt=vt)
    ids = _fill(dynaq_node, "crash", 2000)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def start(fail_on: int | None) -> Any:
        def sink(batch_df: Any, batch_id: int) -> None:
            if fail_on is not None and batch_id == fail_on:
                raise RuntimeError("simulated crash before the batch was made durable")
            batch_df.write.mode("append").parquet(out)

        return (
            spark.readStream.format("dynaq")
            .option("endpoint", dynaq_node.url)
            .option("queue", "crash")
            .option("maxRowsPerTrigger", "500")
            .option("visibilityTimeout", str(vt))
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )

    q = start(fail_on=1)
    with pytest.raises(Exception, match="simulated crash"):
        q.awaitTermination(120)
    # A failed query's reader is not always stopped (so it cannot release what it
    # held): its uncommitted messages come back when their visibility timeout ends.
    time.sleep(vt + 1)
    q = start(fail_on=None)
    q.awaitTermination(120)
    assert q.exception() is None
    got = [r.id for r in spark.read.parquet(out).select("id").collect()]
    assert set(got) == set(ids)  # nothing lost (duplicates would be allowed)
    print(f"\nafter a crash mid-batch: {len(got)} rows for {len(ids)} messages")


def test_write_10000_rows_to_a_topic_lands_in_every_subscribed_queue(
    spark: Any, dynaq_node: NodeProcess
) -> None:
    for q in ("fan-a", "fan-b"):
        _queue(dynaq_node, q)
    _call(f"{dynaq_node.url}/v1/topics/fan", "PUT")
    for q in ("fan-a", "fan-b"):
        _call(f"{dynaq_node.url}/v1/topics/fan/queues/{q}", "PUT")
    df = spark.range(10_000).selectExpr(
        "cast(id as string) as body", "map('row', cast(id as string)) as attributes"
    )
    df.write.format("dynaq").mode("append").option("endpoint", dynaq_node.url).option(
        "topic", "fan"
    ).save()
    for q in ("fan-a", "fan-b"):
        back = (
            spark.read.format("dynaq").option("endpoint", dynaq_node.url).option("queue", q).load()
        )
        rows = back.select("body", "attributes").collect()
        assert len(rows) == 10_000
        assert {bytes(r.body).decode() for r in rows} == {str(i) for i in range(10_000)}
        assert all(r.attributes["row"] == bytes(r.body).decode() for r in rows)
    with pytest.raises(Exception, match="append"):
        df.write.format("dynaq").mode("overwrite").option("endpoint", dynaq_node.url).option(
            "queue", "fan-a"
        ).save()


def test_format_dynaq_is_found_without_register(spark: Any) -> None:
    """``pyspark_dynaq.DefaultSource`` is discovered by Spark's lookup of pyspark_* modules."""
    # What pyspark.sql.worker.lookup_data_sources scans sys.path with.
    from pkgutil import iter_modules

    assert "pyspark_dynaq" in {m.name for m in iter_modules()}
    # No register() call anywhere in this module: the reads above went through discovery.


def test_bench_spark_quick_reports_its_figures() -> None:
    """``python -m bench spark`` as users run it (its own JVM, so a subprocess)."""
    import subprocess
    import sys

    from dynaq.testing.process import ROOT

    run = subprocess.run(
        [sys.executable, "-m", "bench", "spark", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["read_rows_per_s"] > 0 and result["write_rows_per_s"] > 0
    # The same-run yardstick: a plain client reading the same pages, round by round.
    assert result["plain_client_rows_per_s"] > 0
    assert len(result["read_rounds_rows_per_s"]) == len(result["plain_rounds_rows_per_s"]) == 2
    assert result["read_rows_per_s"] == max(result["read_rounds_rows_per_s"])
    assert result["read_vs_plain_client"] > 0
    assert result["read_vs_plain_client"] == pytest.approx(
        result["read_rows_per_s"] / result["plain_client_rows_per_s"], abs=0.01
    )


def test_three_node_ring_reads_every_nodes_partitions(
    spark: Any, cassandra: Any, tmp_path: Path
) -> None:
    """A 3-node ring on Cassandra: the reader asks the ring, then every node for its
    partitions; Spark partitions map one-to-one and every message is read once."""
    from dynaq.testing.cluster import LocalCluster, http_get
    from tests.fixtures.cassandra import new_keyspace

    cluster = LocalCluster(
        tmp_path, 3, backend="cassandra", cassandra_hosts=[cassandra.host], keyspace=new_keyspace()
    )
    with cluster:
        urls = cluster.urls
        _call(f"{urls[0]}/v1/queues/ring", "PUT")
        _call(f"{urls[0]}/v1/queues/ring", "PATCH", {"min_partitions": 2})
        deadline = time.monotonic() + 15
        while not all(http_get(f"{u}/v1/queues/ring")[0] == 200 for u in urls):
            assert time.monotonic() < deadline, "queue config did not reach every node"
            time.sleep(0.1)
        ids: list[int] = []
        for i, u in enumerate(urls):  # every node's writer appends to its own lanes
            with Client(u) as c:
                ids += c.enqueue("ring", [{"body": f"{i}-{k}".encode()} for k in range(1000)])
        time.sleep(1.5)  # partitions are read from each node's state (two per node)
        with Client(urls[0]) as c:
            ring = c.ring()
            parts = [p for m in ring for p in c.partitions("ring", addr=m.http)]
        assert len(ring) == 3
        df = spark.read.format("dynaq").option("endpoint", urls[1]).option("queue", "ring").load()
        assert df.rdd.getNumPartitions() == len(parts) == 6
        rows = df.select("id", "node").collect()
        assert sorted(r.id for r in rows) == sorted(ids)
        owner = {m.name: (m.from_id, m.to_id) for m in ring}
        for r in rows:  # each row was read from the node whose slice holds it
            lo, hi = owner[r.node]
            assert lo <= r.id <= hi


def test_stream_reader_commit_deletes_and_stop_releases(dynaq_node: NodeProcess) -> None:
    """The stream reader's own protocol, without Spark: latestOffset receives and
    holds, partitions hand the held rows out, commit deletes, stop releases the rest."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from dynaq.spark.queue_stream import DynaqStreamReader

    _queue(dynaq_node, "proto", vt=600)
    ids = _fill(dynaq_node, "proto", 300)
    r = DynaqStreamReader(
        {"endpoint": dynaq_node.url, "queue": "proto", "maxrowspertrigger": "100"}
    )
    start = r.initialOffset()
    one = r.latestOffset(start, ReadMaxRows(100))
    assert r.latestOffset(start, ReadMaxRows(100)) == one  # asked twice: the same batch
    two = r.latestOffset(one, ReadMaxRows(100))
    rows = [m.id for p in r.partitions(start, one) for _, _, m in p.rows]
    assert len(rows) == 100
    r.commit(one)  # batch 1 durable downstream: deleted
    r.stop()  # batch 2 received but never committed: released
    assert two == {"batch": 2}
    with Client(dynaq_node.url) as c:
        left = [m.id for m in c.receive("proto", 1000)]
    assert sorted(left) == sorted(set(ids) - set(rows))  # 200 back at once, despite vt=600
