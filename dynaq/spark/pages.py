"""Snapshot pages as Arrow RecordBatches, decoded in the Spark task.

The batch read asks nodes for ``encoding=stored`` pages: ids plus each
message's stored value, which the node sends without decoding. A node is one
process for all readers of a queue, while the tasks decoding here run in
parallel (on several executors in a cluster), so the per-row work belongs here:
a node builds a stored page with a third less CPU than a columnar one.

A stored value is the msgpack array ``[flags, body, enqueued_ms, attributes]``,
then optionally ``group`` and a dead-lettered message's ``origin`` (the layout
of :mod:`dynaq.core.messages`; bit 0 of ``flags``: zlib body). For the common
page (no flags, no attributes, bodies longer than 12 bytes, a 64-bit
``enqueued_ms``) the columns come from vectorized Arrow kernels over the
page's one buffer; any other page is decoded value by value with msgpack.
A node that predates stored pages answers a columnar page: it is read as such.
"""

from __future__ import annotations

import array
import sys
import zlib
from functools import lru_cache
from typing import Any

import msgpack
import pyarrow as pa
import pyarrow.compute as pc

from dynaq.client import Client
from dynaq.spark.common import ARROW_SCHEMA, ATTRIBUTES_TYPE

FLAG_ZLIB = 1
"""Bit 0 of a stored value's flags: the body is zlib-compressed (dynaq.core.messages)."""
_FIXARRAYS = pa.array([0x94, 0x95, 0x96], pa.uint8())
"""A stored value's head: a msgpack fixarray of 4, 5 or 6 members."""
_BIN8, _BIN16, _BIN32, _UINT64, _NIL = 0xC4, 0xC5, 0xC6, 0xCF, 0xC0
_INLINE = 12
"""Arrow binary views hold bodies of up to 12 bytes inline: the fast path takes longer ones."""


def snapshot_page(
    client: Client, queue: str, from_id: int, to_id: int, limit: int, addr: str
) -> dict[str, Any]:
    """One ``encoding=stored`` snapshot page from node ``addr``."""
    return client.snapshot_page(queue, from_id, to_id, limit, addr, encoding="stored")


def _le_array(data: bytes, n: int, kind: pa.DataType, typecode: str) -> pa.Array:
    """A little-endian buffer of ``n`` fixed-width integers as an Arrow array (no copy
    on little-endian hosts)."""
    if sys.byteorder == "little":
        return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(data)])
    a = array.array(typecode, data)
    a.byteswap()
    return pa.array(a, kind)


def _batch(
    ids: pa.Array,
    bodies: pa.Array,
    enqueued_ms: pa.Array,
    attributes: pa.Array,
    partition: int,
    node: str,
) -> pa.RecordBatch:
    n = len(ids)
    return pa.RecordBatch.from_arrays(
        [
            ids,
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.repeat(pa.scalar(node, pa.string()), n),
            bodies,
            pc.multiply(enqueued_ms, 1000).cast(pa.timestamp("us", tz="UTC")),
            attributes,
        ],
        schema=ARROW_SCHEMA,
    )


def _attributes(attrs: list[dict[str, str] | None] | None, n: int) -> pa.Array:
    if not attrs or not any(attrs):
        return pa.nulls(n, ATTRIBUTES_TYPE)
    return pa.array([list(a.items()) if a else None for a in attrs], type=ATTRIBUTES_TYPE)


def page_to_batch(page: dict[str, Any], partition: int, node: str) -> pa.RecordBatch:
    """A snapshot page (stored or columnar) as a RecordBatch in :data:`ARROW_SCHEMA`."""
    n = int(page["count"])
    ids = _le_array(page["ids"], n, pa.int64(), "q")
    if "values" not in page:  # a columnar page: the node decoded it
        bodies = pa.Array.from_buffers(
            pa.binary(),
            n,
            [None, pa.py_buffer(page["body_offsets"]), pa.py_buffer(page["bodies"])],
        )
        enqueued = _le_array(page["enqueued_ms"], n, pa.int64(), "q")
        return _batch(
            ids, bodies, enqueued, _attributes(page.get("attributes"), n), partition, node
        )
    offsets = _le_array(page["value_offsets"], n + 1, pa.int32(), "i")
    fast = _fast_columns(n, offsets, page["values"]) if n else None
    if fast is not None:
        bodies, enqueued = fast
        return _batch(ids, bodies, enqueued, pa.nulls(n, ATTRIBUTES_TYPE), partition, node)
    return _decoded_batch(ids, offsets, page["values"], partition, node)


@lru_cache(maxsize=4)
def _interleave(n: int) -> pa.Array:
    """Indexes that take four int32 columns of ``n`` rows, concatenated, into ``n``
    16-byte rows (length, prefix, buffer 0, offset): Arrow's binary view layout.
    Cached: pages mostly have the same count."""
    return pa.array([(i % 4) * n + i // 4 for i in range(4 * n)], pa.int32())


def _all(mask: pa.Array) -> bool:
    return bool(pc.all(mask).as_py())


def _fast_columns(n: int, offsets: pa.Array, values: bytes) -> tuple[pa.Array, pa.Array] | None:
    """Bodies and enqueue times of a page of plain values, by Arrow kernels over the
    whole buffer; ``None`` when any value is not plain (or is malformed)."""
    data = pa.py_buffer(values)
    u8 = pa.Array.from_buffers(pa.uint8(), len(values), [None, data])
    starts, ends = offsets.slice(0, n), offsets.slice(1, n)

    def at(pos: pa.Array, k: int) -> pa.Array:
        return pc.take(u8, pc.add(pos, pa.scalar(k, pa.int32())))

    try:
        head = at(starts, 0)
        if not (_all(pc.is_in(head, _FIXARRAYS)) and _all(pc.equal(at(starts, 1), 0))):
            return None  # not a stored value, or flags (a compressed body)
        kind = at(starts, 2)
        b3, b4, b5, b6 = (at(starts, k).cast(pa.int32()) for k in (3, 4, 5, 6))
        is8, is16 = pc.equal(kind, _BIN8), pc.equal(kind, _BIN16)
        if not _all(pc.or_(pc.or_(is8, is16), pc.equal(kind, _BIN32))):
            return None
        i32 = pa.int32()
        len16 = pc.bit_wise_or(pc.shift_left(b3, pa.scalar(8, i32)), b4)
        len32 = pc.bit_wise_or(
            pc.shift_left(len16, pa.scalar(16, i32)),
            pc.bit_wise_or(pc.shift_left(b5, pa.scalar(8, i32)), b6),
        )
        length = pc.if_else(is8, b3, pc.if_else(is16, len16, len32))
        header = pc.if_else(
            is8, pa.scalar(4, i32), pc.if_else(is16, pa.scalar(5, i32), pa.scalar(7, i32))
        )
        body_at = pc.add(starts, header)
        after = pc.add(body_at, length)  # enqueued_ms, then attributes
        tail = pc.add(after, pa.scalar(10, i32))  # past the uint64 and a nil
        fits = pc.if_else(pc.equal(head, 0x94), pc.equal(tail, ends), pc.less(tail, ends))
        if not (_all(pc.greater(length, _INLINE)) and _all(fits)):
            return None
        if not (_all(pc.equal(at(after, 0), _UINT64)) and _all(pc.equal(at(after, 9), _NIL))):
            return None  # a small integer time, or attributes
        enqueued: pa.Array = at(after, 1).cast(pa.int64())
        for k in range(2, 9):  # big-endian uint64
            byte = at(after, k).cast(pa.int64())
            enqueued = pc.bit_wise_or(pc.shift_left(enqueued, pa.scalar(8, pa.int64())), byte)
        prefix = at(body_at, 0).cast(pa.uint32())  # a view's first 4 body bytes (LE)
        for k in range(1, 4):
            byte = pc.shift_left(at(body_at, k).cast(pa.uint32()), pa.scalar(8 * k, pa.uint32()))
            prefix = pc.bit_wise_or(prefix, byte)
        zeros = pa.repeat(pa.scalar(0, i32), n)
        rows = pa.concat_arrays([length, prefix.view(i32), zeros, body_at])
        views = pc.take(rows, _interleave(n))
        bodies = pa.Array.from_buffers(pa.binary_view(), n, [None, views.buffers()[1], data])
        return bodies.cast(pa.binary()), enqueued
    except (pa.ArrowException, ValueError):
        return None  # e.g. a malformed length pointing past the page: decoded one by one


def _decoded_batch(
    ids: pa.Array, offsets: pa.Array, values: bytes, partition: int, node: str
) -> pa.RecordBatch:
    """The general case: each stored value decoded with msgpack (flags, attributes, any
    integer width); a malformed value is an error naming its message."""
    view = memoryview(values)
    bounds = offsets.to_pylist()
    bodies: list[bytes] = []
    enqueued: list[int] = []
    attributes: list[dict[str, str] | None] = []
    for i, message_id in enumerate(ids.to_pylist()):
        try:
            fields = msgpack.unpackb(view[bounds[i] : bounds[i + 1]])
            flags, body = fields[0], fields[1]
            if flags & FLAG_ZLIB:
                body = zlib.decompress(body)
            bodies.append(bytes(body))
            enqueued.append(int(fields[2]))
            attributes.append(fields[3])
        except (ValueError, TypeError, LookupError, zlib.error, msgpack.UnpackException) as exc:
            raise ValueError(f"dynaq message {message_id} is corrupt: {exc}") from exc
    return _batch(
        ids,
        pa.array(bodies, pa.binary()),
        pa.array(enqueued, pa.int64()),
        _attributes(attributes, len(bodies)),
        partition,
        node,
    )
