"""``spark.read.format("dynaq").option("stream", name)``: batch reads of a stream.

The stream's index range ``[0, size)`` (its size when the read is planned) is
cut into ranges of ``rowsPerPartition`` entries (100,000), one Spark task
each; a task reads its range in pages of ``pageSize`` (20,000) with
``GET /v2/streams/{name}?i=&n=&nowait=true`` and yields Arrow batches of
``index``, ``order`` and ``entry`` (the entry's JSON text: parse it with
``from_json`` and the stream's schema). A stream is append-only, so a range
read twice gives the same rows. With ``.option("pushdown", "true")`` (and
``spark.sql.python.filterPushdown.enabled=true``), filters on ``index`` bound
the planned range and prune tasks; other filters Spark applies itself.

Like :mod:`dynaq.spark.source`, this imports only :mod:`dynaq.client`,
pyarrow and pyspark; readers and partitions hold plain data only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from dynaq.client import Client

STREAM_SCHEMA = "index long, order long, entry string"
_ARROW = pa.schema([("index", pa.int64()), ("order", pa.int64()), ("entry", pa.string())])


def rows_to_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """Entries as read by :meth:`Client.read_stream` → one Arrow batch."""
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r["index"] for r in rows], pa.int64()),
            pa.array([r["order"] for r in rows], pa.int64()),
            pa.array([json.dumps(r["entry"], separators=(",", ":")) for r in rows], pa.string()),
        ],
        schema=_ARROW,
    )


@dataclass
class IndexRange(InputPartition):
    """Entries ``[start, stop)`` of one stream (pickled to a task)."""

    number: int
    start: int
    stop: int


class StreamReader(DataSourceReader):
    """Plans index ranges; Spark applies every filter (see :class:`StreamPushdownReader`)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.endpoint = options["endpoint"]
        self.stream = options["stream"]
        self.rows_per_partition = max(1, int(options.get("rowsperpartition", "100000")))
        self.page_size = max(1, int(options.get("pagesize", "20000")))
        self.lo, self.hi = 0, 2**63 - 1  # inclusive index bounds from pushed filters

    def partitions(self) -> list[IndexRange]:
        with Client(self.endpoint) as c:
            size = c.stream_size(self.stream)
        stop = min(size, self.hi + 1)
        step = self.rows_per_partition
        return [
            IndexRange(n, a, min(a + step, stop)) for n, a in enumerate(range(self.lo, stop, step))
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, IndexRange):
            return  # every range was pruned: pyspark reads one empty partition
        with Client(self.endpoint) as c:
            start = partition.start
            while start < partition.stop:
                want = min(self.page_size, partition.stop - start)
                rows = c.read_stream(self.stream, start, want)
                if not rows:
                    return  # retention dropped the range meanwhile
                yield rows_to_batch(rows)
                start = int(rows[-1]["index"]) + 1


class StreamPushdownReader(StreamReader):
    """Index filters (``=``, ``<``, ``<=``, ``>``, ``>=``) bound the planned range."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        for f in filters:
            value = getattr(f, "value", None)
            if getattr(f, "attribute", None) != ("index",) or not isinstance(value, int):
                yield f
            elif isinstance(f, EqualTo):
                self.lo, self.hi = max(self.lo, value), min(self.hi, value)
            elif isinstance(f, GreaterThan):
                self.lo = max(self.lo, value + 1)
            elif isinstance(f, GreaterThanOrEqual):
                self.lo = max(self.lo, value)
            elif isinstance(f, LessThan):
                self.hi = min(self.hi, value - 1)
            elif isinstance(f, LessThanOrEqual):
                self.hi = min(self.hi, value)
            else:
                yield f
