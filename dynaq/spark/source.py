"""``spark.read.format("dynaq")``: PySpark data source for dynaq queues and topics.

* **Batch read** (a snapshot: no locks, no deletes): one Spark partition per
  dynaq partition of every live node; each task reads its id range in
  pages of stored values from the node that serves it, one page ahead (the
  node builds the next page while this one is consumed), decodes them itself
  (:mod:`dynaq.spark.pages`: the node does no per-row work) and yields Arrow
  RecordBatches.
  With ``.option("pushdown", "true")`` (and
  ``spark.sql.python.filterPushdown.enabled=true``, off by default), filters
  on ``id`` (``=``, ``<``, ``<=``, ``>``, ``>=``, ``IN``) are pushed down and
  prune whole partitions; by default Spark applies every filter itself, with
  the same result.
* **Streaming read** (at least once): each micro-batch receives messages under
  the visibility timeout on every node and deletes them only in ``commit()``,
  after Spark has made the batch durable; a crashed query's messages come
  back after the timeout. ``maxRowsPerTrigger`` caps a micro-batch.
* **Write** (``mode("append")``): rows (``body`` binary or string, optional
  ``attributes`` map, ``group``, ``dedup_id``) are enqueued into ``queue`` or
  published to ``topic`` in batches of 1000; each task reports its count.

With ``.option("stream", name)`` instead of a queue, the batch read is of a
typed stream (:mod:`dynaq.spark.streams`). The streaming read is
:mod:`dynaq.spark.queue_stream`, the write :mod:`dynaq.spark.writer`.

Options: ``endpoint`` (``http://host:port`` of any node), ``token`` (a client
token, sent as ``Authorization: Bearer``), ``queue`` / ``topic``,
``pageSize`` (rows per snapshot page, 20000), ``pushdown`` (``true``: the batch
reader takes id filters; ``false``, the default), ``visibilityTimeout``
(seconds a streamed message stays locked until its batch commits, 300),
``maxRowsPerTrigger`` (10000).

Why pushdown is an option: pyspark refuses to plan a read whose reader class
overrides ``pushFilters`` while ``spark.sql.python.filterPushdown.enabled`` is
false (``DATA_SOURCE_PUSHDOWN_DISABLED``), and that conf is not visible to a
data source: it is created and asked for its reader in Python planner workers
that get only the options. So :meth:`DynaqDataSource.reader` picks the reader
class from the ``pushdown`` option: :class:`DynaqReader` (no ``pushFilters``)
works in every session; :class:`DynaqPushdownReader` needs the conf, and
pyspark's own error says so when it is off.

This module imports only :mod:`dynaq.client`, pyarrow and pyspark, so it
loads inside a Spark worker. Reader objects and partitions are pickled to
executors: they hold plain data only; connections are opened inside ``read``.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from dynaq.client import Client
from dynaq.spark.common import (
    MAX_ID,
    SCHEMA,
    flag_option,
    normalized_options,
    required_option,
)
from dynaq.spark.pages import page_to_batch, snapshot_page
from dynaq.spark.queue_stream import DynaqStreamReader
from dynaq.spark.stream_offsets import StreamOffsetReader
from dynaq.spark.streams import STREAM_SCHEMA, StreamPushdownReader, StreamReader
from dynaq.spark.writer import DynaqWriter

# batch read --------------------------------------------------------------------


@dataclass
class RangePartition(InputPartition):
    """One dynaq partition: an id range served by one node (pickled to a task)."""

    index: int
    node: str
    http: str
    from_id: int
    to_id: int


class DynaqReader(DataSourceReader):
    """Snapshot reader: plans one Spark partition per dynaq partition.

    It does not override ``pushFilters``, so it runs whatever
    ``spark.sql.python.filterPushdown.enabled`` says; Spark applies the filters.
    The id bounds below are only ever narrowed by :class:`DynaqPushdownReader`.
    """

    def __init__(self, options: dict[str, str]) -> None:
        self.endpoint = required_option(options, "endpoint")
        self.token = options.get("token") or None
        self.queue = required_option(options, "queue")
        self.page_size = int(options.get("pagesize", "20000"))
        self.lo, self.hi = 0, MAX_ID
        self.ids: list[int] | None = None

    def partitions(self) -> list[RangePartition]:
        with Client(self.endpoint, token=self.token) as c:
            parts: list[RangePartition] = []
            for member in c.ring():
                for p in c.partitions(self.queue, addr=member.http):
                    lo, hi = max(p.from_id, self.lo), min(p.to_id, self.hi)
                    if lo > hi:
                        continue  # pruned by the id filters
                    if self.ids is not None and not any(lo <= i <= hi for i in self.ids):
                        continue
                    parts.append(RangePartition(len(parts), p.node, p.http, lo, hi))
        return parts

    def read(self, partition: InputPartition) -> Generator[pa.RecordBatch, None, None]:
        if not isinstance(partition, RangePartition):
            # partitions() planned none (the id filters pruned them all): pyspark
            # reads one InputPartition(None) instead, which holds no rows.
            return
        # The endpoint's scheme and token, sent to the node that serves the range.
        # The next page is asked for while this one is decoded and consumed: the
        # node builds it meanwhile instead of idling (one page ahead, one thread,
        # so the client is never used by two threads at once).
        with Client(self.endpoint, token=self.token) as c, ThreadPoolExecutor(1) as pool:

            def fetch(start: int) -> dict[str, Any]:
                return snapshot_page(
                    c, self.queue, start, partition.to_id, self.page_size, partition.http
                )

            ahead = pool.submit(fetch, partition.from_id)
            try:
                while True:
                    page = ahead.result()
                    nxt = page["next_from_id"]
                    if nxt is not None:
                        ahead = pool.submit(fetch, nxt)
                    if page["count"]:
                        batch = page_to_batch(page, partition.index, partition.node)
                        if self.ids is not None:
                            mask = pc.is_in(batch.column(0), pa.array(self.ids, pa.int64()))
                            batch = batch.filter(mask)
                        yield batch
                    if nxt is None:
                        return
            finally:
                ahead.cancel()


class DynaqPushdownReader(DynaqReader):
    """The snapshot reader with id filters pushed down (``.option("pushdown", "true")``;
    needs ``spark.sql.python.filterPushdown.enabled=true``): they prune partitions,
    bound each partition's scan, and Spark does not apply them again."""

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Take id-range filters (they prune partitions and bound each scan); hand back the rest."""
        for f in filters:
            attr = getattr(f, "attribute", None)
            if attr != ("id",):
                yield f
            elif isinstance(f, EqualTo) and isinstance(f.value, int):
                self.lo, self.hi = max(self.lo, f.value), min(self.hi, f.value)
            elif isinstance(f, GreaterThan) and isinstance(f.value, int):
                self.lo = max(self.lo, f.value + 1)
            elif isinstance(f, GreaterThanOrEqual) and isinstance(f.value, int):
                self.lo = max(self.lo, f.value)
            elif isinstance(f, LessThan) and isinstance(f.value, int):
                self.hi = min(self.hi, f.value - 1)
            elif isinstance(f, LessThanOrEqual) and isinstance(f.value, int):
                self.hi = min(self.hi, f.value)
            elif isinstance(f, In) and all(isinstance(v, int) for v in f.value):
                values = sorted(set(f.value))
                self.ids = values if self.ids is None else sorted(set(self.ids) & set(values))
                if values:
                    self.lo, self.hi = max(self.lo, values[0]), min(self.hi, values[-1])
            else:
                yield f


class DynaqDataSource(DataSource):
    """``format("dynaq")``."""

    @classmethod
    def name(cls) -> str:
        return "dynaq"

    def schema(self) -> str:
        return STREAM_SCHEMA if "stream" in normalized_options(self.options) else SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        options = normalized_options(self.options)
        if "stream" in options:  # a typed stream: see dynaq.spark.streams
            if flag_option(options, "pushdown"):
                return StreamPushdownReader(options)
            return StreamReader(options)
        if flag_option(options, "pushdown"):
            return DynaqPushdownReader(options)
        return DynaqReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = normalized_options(self.options)
        if "stream" in options:  # indexes as offsets: see dynaq.spark.stream_offsets
            return StreamOffsetReader(options)
        return DynaqStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DynaqWriter:
        if overwrite:
            raise ValueError("dynaq supports mode('append') only: a queue cannot be overwritten")
        return DynaqWriter(normalized_options(self.options), schema)
