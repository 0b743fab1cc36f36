"""``spark.read.format("dynaq").option("stream", name)``: batch reads of a stream.

The stream's index range ``[0, size)`` (its size when the read is planned) is
cut into ranges of ``rowsPerPartition`` entries (100,000), one Spark task
each; a task reads its range in pages of ``pageSize`` (20,000) with
``GET /v2/streams/{name}?i=&n=&nowait=true`` and yields Arrow batches of
``index``, ``order`` and ``entry`` (the entry's JSON text: parse it with
``from_json`` and the stream's schema). A stream is append-only, so a range
read twice gives the same rows. With ``.option("pushdown", "true")`` (and
``spark.sql.python.filterPushdown.enabled=true``), filters on ``index`` and on
``order`` bound the planned range and prune tasks (order keys never decrease,
so an order bound is an index bound, found by a binary search of single-entry
reads); other filters Spark applies itself.

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
        self.order_lo: int | None = None  # inclusive order-key bounds from pushed filters
        self.order_hi: int | None = None

    def partitions(self) -> list[IndexRange]:
        with Client(self.endpoint) as c:
            size = c.stream_size(self.stream)
            lo, hi = self.lo, self.hi
            if self.order_lo is not None:
                lo = max(lo, _first_at_least(c, self.stream, size, self.order_lo))
            if self.order_hi is not None:
                hi = min(hi, _first_at_least(c, self.stream, size, self.order_hi + 1) - 1)
        stop = min(size, hi + 1)
        step = self.rows_per_partition
        return [IndexRange(n, a, min(a + step, stop)) for n, a in enumerate(range(lo, stop, step))]

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


def _first_at_least(c: Client, stream: str, size: int, order: int) -> int:
    """The first index whose order key is at least ``order`` (``size`` if none): order
    keys never decrease, so a binary search of single-entry reads finds it. An
    index that retention dropped meanwhile reads as below every bound."""
    lo, hi = 0, size
    while lo < hi:
        mid = (lo + hi) // 2
        rows = c.read_stream(stream, mid, 1)
        if rows and int(rows[0]["index"]) == mid and int(rows[0]["order"]) >= order:
            hi = mid
        else:
            lo = mid + 1
    return lo


class StreamPushdownReader(StreamReader):
    """Filters on ``index`` and ``order`` (``=``, ``<``, ``<=``, ``>``, ``>=``) bound the
    planned range."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        for f in filters:
            value = getattr(f, "value", None)
            column = getattr(f, "attribute", None)
            if column == ("order",) and isinstance(value, int) and self._push_order(f, value):
                continue
            if column != ("index",) or not isinstance(value, int):
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

    def _push_order(self, f: Filter, value: int) -> bool:
        """Take an order-key bound; ``False`` for a filter kind Spark must apply."""
        lo = self.order_lo if self.order_lo is not None else 0
        hi = self.order_hi if self.order_hi is not None else 2**63 - 1
        if isinstance(f, EqualTo):
            lo, hi = max(lo, value), min(hi, value)
        elif isinstance(f, GreaterThan):
            lo = max(lo, value + 1)
        elif isinstance(f, GreaterThanOrEqual):
            lo = max(lo, value)
        elif isinstance(f, LessThan):
            hi = min(hi, value - 1)
        elif isinstance(f, LessThanOrEqual):
            hi = min(hi, value)
        else:
            return False
        self.order_lo, self.order_hi = lo, hi
        return True
