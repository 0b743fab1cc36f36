"""``df.write.format("dynaq")``: rows enqueued into a queue or published to a topic."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from dynaq.client import Client
from dynaq.spark.common import required_option


@dataclass
class WriteCount(WriterCommitMessage):
    """What one task wrote."""

    count: int


class DynaqWriter(DataSourceArrowWriter):
    """Enqueue (``queue``) or publish (``topic``) every row, 1000 per request."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.endpoint = required_option(options, "endpoint")
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
