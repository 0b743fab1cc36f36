"""Bulk snapshot reads of a queue: key-range pages for analytics (the Spark data source).

A snapshot read is a plain range scan of the stored messages: it takes no
lock, changes no in-flight state and deletes nothing, so it never disturbs
consumers. Pages are columnar and Arrow-friendly: ids and enqueue times as
little-endian int64 buffers, bodies as one buffer plus int32 offsets (Arrow's
binary layout), so a reader builds a RecordBatch without touching each row.
"""

from __future__ import annotations

import array
import sys
from dataclasses import dataclass
from itertools import accumulate

from dynaq.core import keys
from dynaq.core.messages import decode_fields
from dynaq.errors import InvalidInput
from dynaq.services.catalog import QueueInfo
from dynaq.storage.base import Store

MAX_PAGE = 50_000
MAX_PAGE_BYTES = 16 * 1024 * 1024
"""Bodies per page: a page is built in memory (and base64'd for JSON), so it is capped
well below what a node can hold for several readers at once."""
_CHUNK_ROWS = 1024
"""Rows read per store call, so the byte cap applies before a whole page is read."""


@dataclass(frozen=True)
class SnapshotPage:
    """Up to ``limit`` messages with ``from_id <= id <= to_id``, ascending, as columns."""

    count: int
    ids: bytes
    enqueued_ms: bytes
    body_offsets: bytes
    bodies: bytes
    attributes: list[dict[str, str] | None] | None
    next_from_id: int | None
    """Where the next page starts; ``None`` when the range is exhausted."""


def _le(values: list[int], typecode: str) -> bytes:
    a = array.array(typecode, values)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


async def read_page(
    store: Store, info: QueueInfo, from_id: int, to_id: int, limit: int
) -> SnapshotPage:
    """Read one page of the queue's stored messages in ``[from_id, to_id]``."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit must be in 1..{MAX_PAGE}")
    if from_id > to_id:
        raise InvalidInput("from_id must not be greater than to_id")
    ids: list[int] = []
    enqueued: list[int] = []
    bodies: list[bytes] = []
    attributes: list[dict[str, str] | None] = []
    size = 0
    message_id = keys.message_id
    start, end = keys.message(info.number, from_id), keys.message(info.number, to_id + 1)
    exhausted = False
    while len(ids) < limit and size < MAX_PAGE_BYTES:
        want = min(_CHUNK_ROWS, limit - len(ids))
        rows = await store.scan(start, end, want)
        for k, v in rows:
            # This loop is the whole cost of a page: columns, no Message objects.
            mid = message_id(k)
            body, enqueued_ms, attrs, _ = decode_fields(mid, v)
            enqueued.append(enqueued_ms)
            attributes.append(attrs)
            ids.append(mid)
            bodies.append(body)
            size += len(body)
            if attrs:  # attributes are part of the page too (up to the message limit)
                size += sum(len(a) + len(b) for a, b in attrs.items())
            if size >= MAX_PAGE_BYTES:
                break  # the page is full; the next one starts after this row
        else:
            if len(rows) < want:
                exhausted = True
                break
        start = rows[-1][0] + b"\x00"
    next_from = ids[-1] + 1 if ids and not exhausted and ids[-1] < to_id else None
    return SnapshotPage(
        count=len(ids),
        ids=_le(ids, "q"),
        enqueued_ms=_le(enqueued, "q"),
        body_offsets=_le([0, *accumulate(len(b) for b in bodies)], "i"),
        bodies=b"".join(bodies),
        attributes=attributes if any(a is not None for a in attributes) else None,
        next_from_id=next_from,
    )
