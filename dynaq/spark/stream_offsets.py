"""``spark.readStream.format("dynaq").option("stream", name)``: a stream's indexes as
Spark offsets.

An offset is ``{"index": n}``: the next index to read. Each micro-batch reads
``[start, end)`` in index ranges (:class:`~dynaq.spark.streams.IndexRange`),
where ``end`` is the stream's size when the batch is planned, capped by
``maxRowsPerTrigger`` (100,000). A stream is append-only and its entries never
change, so a range read again gives the same rows: with a checkpointed query
and an idempotent sink (Spark's file sinks, ``foreachBatch`` keyed by batch
id), every entry reaches the sink exactly once, across query crashes and
restarts. ``startingIndex`` (0) is where a query without a checkpoint begins
(``latest``: the size when it starts). ``commit`` has nothing to release:
Spark's checkpoint is the only cursor.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from dynaq.client import Client
from dynaq.spark.streams import IndexRange, StreamReader


class StreamOffsetReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of index ranges (see the module docstring)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.ranges = StreamReader(options)
        self.max_rows = max(1, int(options.get("maxrowspertrigger", "100000")))
        start = options.get("startingindex", "0").strip().lower()
        if start != "latest" and not (start.isdigit() and len(start) <= 19):
            raise ValueError('.option("startingIndex", ...) must be an index or "latest"')
        self.starting = start
        self.available_now: int | None = None
        """With ``Trigger.AvailableNow``: the size when the query started (its last offset)."""

    def _size(self) -> int:
        with Client(self.ranges.endpoint) as c:
            return c.stream_size(self.ranges.stream)

    def initialOffset(self) -> dict[str, int]:
        return {"index": self._size() if self.starting == "latest" else int(self.starting)}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows)

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now = self._size()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        end = self._size() if self.available_now is None else self.available_now
        begin = int(start["index"])
        if isinstance(limit, ReadMaxRows):
            end = min(end, begin + limit.max_rows)
        elif not isinstance(limit, ReadAllAvailable):
            end = min(end, begin + self.max_rows)
        return {"index": max(begin, end)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[IndexRange]:
        step = self.ranges.rows_per_partition
        lo, hi = int(start["index"]), int(end["index"])
        return [IndexRange(n, a, min(a + step, hi)) for n, a in enumerate(range(lo, hi, step))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.ranges.read(partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the entries stay in the stream, the offset in Spark's
        checkpoint."""
