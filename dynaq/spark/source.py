"""``spark.read.format("dynaq")``: PySpark data source for dynaq queues and topics.

* **Batch read** (a snapshot: no locks, no deletes): one Spark partition per
  dynaq partition of every live node; each task reads its id range in
  columnar pages from the node that serves it and yields Arrow RecordBatches.
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
typed stream (:mod:`dynaq.spark.streams`).

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

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
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
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from dynaq.client import Client, DynaqError, ReceivedMessage
from dynaq.spark.streams import STREAM_SCHEMA, StreamPushdownReader, StreamReader

SCHEMA = (
    "id bigint, partition int, node string, body binary, "
    "enqueued_at timestamp, attributes map<string,string>"
)
MAX_ID = 2**63 - 1

_MAP = pa.map_(pa.string(), pa.string())
ARROW_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("partition", pa.int32()),
        ("node", pa.string()),
        ("body", pa.binary()),
        ("enqueued_at", pa.timestamp("us", tz="UTC")),
        ("attributes", pa.map_(pa.string(), pa.string())),
    ]
)


def _options(options: Any) -> dict[str, str]:
    """Spark's options are case-insensitive: keep them as a plain dict with lower-case keys."""
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def _option(options: dict[str, str], name: str, default: str | None = None) -> str:
    value = options.get(name.lower(), default)
    if value is None or value == "":
        raise ValueError(f'the dynaq data source needs .option("{name}", ...)')
    return value


def _flag(options: dict[str, str], name: str) -> bool:
    """A boolean option: ``true`` or ``false`` (any case), ``false`` when absent."""
    value = options.get(name.lower(), "false").strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f'.option("{name}", ...) must be true or false, not {value!r}')
    return value == "true"


def _buffer(data: bytes) -> pa.Buffer:
    return pa.py_buffer(data)


def _le_int64(data: bytes, n: int) -> pa.Array:
    arr = pa.Array.from_buffers(pa.int64(), n, [None, _buffer(data)])
    if sys.byteorder != "little":  # pages are little-endian
        arr = pa.array(arr.to_numpy().byteswap())
    return arr


def page_to_batch(page: dict[str, Any], partition: int, node: str) -> pa.RecordBatch:
    """A snapshot page as an Arrow RecordBatch in :data:`ARROW_SCHEMA` (no per-row Python
    work except attributes, which only pages that have any carry)."""
    n = int(page["count"])
    ids = _le_int64(page["ids"], n)
    enq_ms = _le_int64(page["enqueued_ms"], n)
    bodies = pa.Array.from_buffers(
        pa.binary(), n, [None, _buffer(page["body_offsets"]), _buffer(page["bodies"])]
    )
    enqueued = pc.multiply(enq_ms, 1000).cast(pa.timestamp("us", tz="UTC"))
    attrs = page.get("attributes")
    attributes = (
        pa.array([list(a.items()) if a else None for a in attrs], type=_MAP)
        if attrs
        else pa.nulls(n, _MAP)
    )
    return pa.RecordBatch.from_arrays(
        [
            ids,
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.repeat(pa.scalar(node, pa.string()), n),
            bodies,
            enqueued,
            attributes,
        ],
        schema=ARROW_SCHEMA,
    )


def received_to_batch(messages: Sequence[tuple[int, str, ReceivedMessage]]) -> pa.RecordBatch:
    """Streamed messages ``(partition, node, message)`` as one RecordBatch."""
    return pa.RecordBatch.from_arrays(
        [
            pa.array([m.id for _, _, m in messages], pa.int64()),
            pa.array([p for p, _, _ in messages], pa.int32()),
            pa.array([n for _, n, _ in messages], pa.string()),
            pa.array([m.body for _, _, m in messages], pa.binary()),
            pa.array([m.enqueued_at_ms * 1000 for _, _, m in messages], pa.int64()).cast(
                pa.timestamp("us", tz="UTC")
            ),
            pa.array(
                [list(m.attributes.items()) if m.attributes else None for _, _, m in messages],
                type=pa.map_(pa.string(), pa.string()),
            ),
        ],
        schema=ARROW_SCHEMA,
    )


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
        self.endpoint = _option(options, "endpoint")
        self.token = options.get("token") or None
        self.queue = _option(options, "queue")
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

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            # partitions() planned none (the id filters pruned them all): pyspark
            # reads one InputPartition(None) instead, which holds no rows.
            return
        # The endpoint's scheme and token, sent to the node that serves the range.
        with Client(self.endpoint, token=self.token) as c:
            start = partition.from_id
            while True:
                page = c.snapshot_page(
                    self.queue, start, partition.to_id, self.page_size, addr=partition.http
                )
                if page["count"]:
                    batch = page_to_batch(page, partition.index, partition.node)
                    if self.ids is not None:
                        mask = pc.is_in(batch.column(0), pa.array(self.ids, pa.int64()))
                        batch = batch.filter(mask)
                    yield batch
                nxt = page["next_from_id"]
                if nxt is None:
                    return
                start = nxt


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


# streaming read ------------------------------------------------------------------


@dataclass
class HeldBatch(InputPartition):
    """The messages one micro-batch received from one node (pickled to a task)."""

    node: str
    rows: list[tuple[int, str, ReceivedMessage]] = field(default_factory=list)


class DynaqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """At-least-once stream: receive under the visibility timeout, delete in ``commit``.

    Offsets are micro-batch numbers (``{"batch": n}``). The messages of batches
    not yet committed live on the driver, in this object; if the driver dies
    they are simply not deleted and the queue serves them again after the
    visibility timeout (duplicates, never loss).
    """

    def __init__(self, options: dict[str, str]) -> None:
        self.endpoint = _option(options, "endpoint")
        self.token = options.get("token") or None
        self.queue = _option(options, "queue")
        self.visibility_s = float(options.get("visibilitytimeout", "300"))
        self.max_rows = int(options.get("maxrowspertrigger", "10000"))
        self.held: dict[int, list[HeldBatch]] = {}
        self._client: Client | None = None

    def _c(self) -> Client:
        if self._client is None:
            self._client = Client(self.endpoint, token=self.token)
        return self._client

    def initialOffset(self) -> dict[str, int]:
        return {"batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows)

    def prepareForTriggerAvailableNow(self) -> None:
        """Available-now ends when a receive on every node finds nothing (the queue is drained)."""

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        # A queue has no end offset to read "all" up to, and a micro-batch's
        # messages are held on the driver until commit: every batch is capped
        # by maxRowsPerTrigger, available-now ones too (they drain the queue
        # batch by batch until a receive on every node finds nothing).
        want = self.max_rows
        if isinstance(limit, ReadMaxRows):
            want = min(want, limit.max_rows)
        n = int(start["batch"]) + 1
        if n in self.held:  # asked again before the batch ran: the same batch, not a new one
            return {"batch": n}
        c = self._c()
        members = c.ring()
        got: list[HeldBatch] = []
        total = 0
        for p, m in enumerate(members):
            rows: list[tuple[int, str, ReceivedMessage]] = []
            while total < want:
                msgs = c.receive(
                    self.queue, min(1000, want - total), self.visibility_s, addr=m.http
                )
                if not msgs:
                    break
                rows.extend((p, m.name, msg) for msg in msgs)
                total += len(msgs)
            if rows:
                got.append(HeldBatch(m.http, rows))
        if not got:
            return start
        self.held[n] = got
        return {"batch": n}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[HeldBatch]:
        out: list[HeldBatch] = []
        for n in range(int(start["batch"]) + 1, int(end["batch"]) + 1):
            out.extend(self.held.get(n, []))  # a batch lost with a dead driver is redelivered
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, HeldBatch)
        if partition.rows:
            yield received_to_batch(partition.rows)

    def commit(self, end: dict[str, int]) -> None:
        """Spark made every batch up to ``end`` durable: acknowledge their messages."""
        c = self._c()
        for n in sorted(k for k in self.held if k <= int(end["batch"])):
            for hb in self.held[n]:
                # Delete through the node that served them: it knows them without a read.
                c.delete(self.queue, [m.id for _, _, m in hb.rows], addr=hb.node)
            del self.held[n]

    def stop(self) -> None:
        """The query stopped: release what was received but never committed, so it is
        served again now rather than after the visibility timeout. (Spark does not
        call this when a query dies; then the timeout brings the messages back.)"""
        c = self._c()
        try:
            for batches in self.held.values():
                for hb in batches:
                    c.release(self.queue, [m.id for _, _, m in hb.rows], addr=hb.node)
        except DynaqError:
            pass  # the timeout brings them back anyway
        finally:
            self.held.clear()
            c.close()
            self._client = None


# write -----------------------------------------------------------------------------


@dataclass
class WriteCount(WriterCommitMessage):
    """What one task wrote."""

    count: int


class DynaqWriter(DataSourceArrowWriter):
    """Enqueue (``queue``) or publish (``topic``) every row, 1000 per request."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.endpoint = _option(options, "endpoint")
        self.token = options.get("token") or None
        self.queue = options.get("queue") or None
        self.topic = options.get("topic") or None
        if (self.queue is None) == (self.topic is None):
            raise ValueError('give exactly one of .option("queue", ...) or .option("topic", ...)')
        names = set(schema.names)
        if "body" not in names:
            raise ValueError("the DataFrame needs a 'body' column (binary or string)")
        self.columns = [c for c in ("body", "attributes", "group", "dedup_id") if c in names]

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteCount:
        count = 0
        with Client(self.endpoint, token=self.token) as c:
            for batch in iterator:
                cols = {name: batch.column(name).to_pylist() for name in self.columns}
                messages: list[dict[str, Any]] = []
                for i in range(batch.num_rows):
                    body = cols["body"][i]
                    m: dict[str, Any] = {"body": body.encode() if isinstance(body, str) else body}
                    if "attributes" in cols and cols["attributes"][i]:
                        m["attributes"] = dict(cols["attributes"][i])
                    for k in ("group", "dedup_id"):
                        if k in cols and cols[k][i] is not None:
                            m[k] = cols[k][i]
                    messages.append(m)
                if self.queue is not None:
                    c.enqueue(self.queue, messages)
                else:
                    assert self.topic is not None
                    c.publish(self.topic, messages)
                count += len(messages)
        return WriteCount(count)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task's messages are durable in dynaq once its write returned."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Rows already written stay (a queue has no transactions); Spark retries the failed task."""


class DynaqDataSource(DataSource):
    """``format("dynaq")``."""

    @classmethod
    def name(cls) -> str:
        return "dynaq"

    def schema(self) -> str:
        return STREAM_SCHEMA if "stream" in _options(self.options) else SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        options = _options(self.options)
        if "stream" in options:  # a typed stream: see dynaq.spark.streams
            if _flag(options, "pushdown"):
                return StreamPushdownReader(options)
            return StreamReader(options)
        if _flag(options, "pushdown"):
            return DynaqPushdownReader(options)
        return DynaqReader(options)

    def streamReader(self, schema: StructType) -> DynaqStreamReader:
        return DynaqStreamReader(_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DynaqWriter:
        if overwrite:
            raise ValueError("dynaq supports mode('append') only: a queue cannot be overwritten")
        return DynaqWriter(_options(self.options), schema)
