"""Batch reads of a typed stream through ``spark.read.format("dynaq").option("stream", ...)``,
against a real node process and a real local[2] SparkSession."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dynaq.testing.process import NodeProcess, node_process

pytestmark = pytest.mark.slow

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def _call(url: str, method: str, body: Any) -> Any:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def stream_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """A node with a stream ``ticks`` of 2,500 entries (order key ``ts`` = 10 times the index)."""
    p = node_process(tmp_path_factory.mktemp("spark-streams"), "spark-s").start()
    try:
        schema = {
            "type": "object",
            "properties": {"ts": {"type": "integer"}, "v": {"type": "string"}},
            "required": ["ts"],
        }
        _call(f"{p.url}/v2/streams/ticks", "PUT", {"schema": schema, "order_key": "ts"})
        for k in range(5):
            entries = [{"ts": 10 * i, "v": f"e{i}"} for i in range(500 * k, 500 * (k + 1))]
            _call(f"{p.url}/v2/streams/ticks/entries", "POST", {"entries": entries})
        yield p
    finally:
        p.terminate()


def _read(spark: Any, node: NodeProcess, **options: str) -> Any:
    reader = spark.read.format("dynaq").option("endpoint", node.url).option("stream", "ticks")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_a_stream_reads_in_parallel_index_ranges(spark: Any, stream_node: NodeProcess) -> None:
    df = _read(spark, stream_node, rowsPerPartition="1000", pageSize="300")
    assert df.columns == ["index", "order", "entry"]
    assert df.rdd.getNumPartitions() == 3  # [0,1000), [1000,2000), [2000,2500)
    rows = df.collect()
    assert [r["index"] for r in rows] == list(range(2500))
    assert all(r["order"] == 10 * r["index"] for r in rows)
    assert json.loads(rows[7]["entry"]) == {"ts": 70, "v": "e7"}
    # Spark applies filters on any column (pushdown off: Spark's default).
    assert _read(spark, stream_node).filter("order >= 24000").count() == 100


def test_index_filters_are_pushed_down_and_prune_ranges(
    spark: Any, stream_node: NodeProcess
) -> None:
    spark.conf.set(PUSHDOWN_CONF, "true")
    try:
        df = _read(spark, stream_node, pushdown="true", rowsPerPartition="1000")
        narrowed = df.filter("index >= 2100 AND index < 2110")
        assert narrowed.rdd.getNumPartitions() == 1  # the range was bounded when planned
        assert [r["index"] for r in narrowed.collect()] == list(range(2100, 2110))
    finally:
        spark.conf.unset(PUSHDOWN_CONF)


def test_order_key_filters_are_pushed_down_as_an_index_range(
    spark: Any, stream_node: NodeProcess
) -> None:
    spark.conf.set(PUSHDOWN_CONF, "true")
    try:
        df = _read(spark, stream_node, pushdown="true", rowsPerPartition="1000")
        narrowed = df.filter("order >= 21000 AND order < 21100")  # ts = 10 * index
        assert narrowed.rdd.getNumPartitions() == 1  # bounded when planned, by name only
        assert [r["index"] for r in narrowed.collect()] == list(range(2100, 2110))
        assert df.filter("order > 24985").count() == 1  # only index 2499 (ts 24990)
        assert df.filter("order = 5").count() == 0  # between two keys: nothing
    finally:
        spark.conf.unset(PUSHDOWN_CONF)


def test_read_stream_uses_indexes_as_offsets_exactly_once_across_restarts(
    spark: Any, stream_node: NodeProcess, tmp_path: Path
) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    base = f"{stream_node.url}/v2/streams/live"
    _call(base, "PUT", {"schema": schema, "order_key": "n"})
    _call(f"{base}/entries", "POST", {"entries": [{"n": i} for i in range(2500)]})
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def run() -> None:
        q = (
            spark.readStream.format("dynaq")
            .option("endpoint", stream_node.url)
            .option("stream", "live")
            .option("maxRowsPerTrigger", "1000")
            .option("rowsPerPartition", "400")
            .load()
            .writeStream.format("parquet")
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start(out)
        )
        q.awaitTermination(120)
        assert q.exception() is None
        # At most maxRowsPerTrigger a micro-batch.
        assert all(p["numInputRows"] <= 1000 for p in q.recentProgress)

    def indexes() -> list[int]:
        return sorted(r["index"] for r in spark.read.parquet(out).select("index").collect())

    run()
    assert indexes() == list(range(2500))
    _call(f"{base}/entries", "POST", {"entries": [{"n": i} for i in range(2500, 2600)]})
    run()  # from the checkpoint: only what was appended since
    assert indexes() == list(range(2600))
    run()  # nothing new: nothing read
    assert indexes() == list(range(2600))
