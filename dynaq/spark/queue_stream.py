"""``spark.readStream.format("dynaq")`` on a queue: at-least-once micro-batches.

Each micro-batch receives messages under the visibility timeout on every node
and deletes them only in ``commit()``, after Spark has made the batch durable;
a crashed query's messages come back after the timeout.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from dynaq.client import Client, DynaqError, ReceivedMessage
from dynaq.spark.common import ARROW_SCHEMA, required_option


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
        self.endpoint = required_option(options, "endpoint")
        self.token = options.get("token") or None
        self.queue = required_option(options, "queue")
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
