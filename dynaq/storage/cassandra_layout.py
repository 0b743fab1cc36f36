"""How the Cassandra store lays keys out, and its partition-walking helpers.

Pure functions, no I/O (the store in :mod:`dynaq.storage.cassandra` does the
queries). Message keys (``m`` + queue number + id) map to ``(queue, lane, id)``
and to a *position* ``queue << 63 | id``, so a byte range of keys becomes a
range of positions; every other key maps to partition = its first byte.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from dynaq.storage.base import LANE_BITS, LANE_SHIFT, MESSAGE_KEY_LEN, MESSAGE_PREFIX

M_BYTE = MESSAGE_PREFIX[0]
ID_BITS = 63
ID_MASK = (1 << ID_BITS) - 1
LANES = 1 << LANE_BITS
END = 1 << 95  # past the last message position (queue << 63 | id)
MAX_WINDOW = 64  # partitions read concurrently by one scan

P = TypeVar("P")
K = TypeVar("K")


def is_message(key: bytes) -> bool:
    return len(key) == MESSAGE_KEY_LEN and key[0] == M_BYTE and key[5] < 0x80


def msg_parts(key: bytes) -> tuple[int, int, int]:
    """(queue, lane, id) of a message key."""
    q = int.from_bytes(key[1:5], "big")
    mid = int.from_bytes(key[5:13], "big")
    return q, mid >> LANE_SHIFT, mid


def msg_key(q: int, mid: int) -> bytes:
    return MESSAGE_PREFIX + q.to_bytes(4, "big") + mid.to_bytes(8, "big")


def msg_pos(bound: bytes) -> int:
    """Position (queue << 63 | id) of the first message key ``>= bound``; ``END`` if none."""
    if bound <= b"m":
        return 0
    if bound[0] > M_BYTE:
        return END
    rest = bound[1:]
    n = int.from_bytes(rest[:12].ljust(12, b"\x00"), "big")
    if len(rest) > 12:
        n += 1  # bound[:13] is a proper prefix of bound, so smaller than it
    q, mid = n >> 64, n & ((1 << 64) - 1)
    if mid > ID_MASK:
        q, mid = q + 1, 0  # ids with the top bit set are not message keys
    if q >= 1 << 32:
        return END
    return (q << ID_BITS) | mid


def kv_part(key: bytes) -> tuple[int, bytes]:
    return (key[0], key) if key else (-1, b"\x00")


async def live(
    run: Callable[[K, int], Awaitable[list[Any]]], lo: K, n: int, after: Callable[[K], K]
) -> list[Any]:
    """Up to ``n`` rows of one partition from ``lo`` on, skipping bare row markers.

    Fewer than ``n`` rows means the partition has no more in range.
    """
    out: list[Any] = []
    while True:
        want = n - len(out)
        rows = await run(lo, want)
        out.extend(r for r in rows if r[-1] is not None)
        if len(rows) < want or len(out) >= n:
            return out
        lo = after(rows[-1][0])


def after_blob(key: bytes) -> bytes:
    return key + b"\x00"


def after_id(mid: int) -> int:
    return mid + 1


def row_key(row: tuple[bytes, bytes]) -> bytes:
    return row[0]


def same_key(key: bytes) -> bytes:
    return key


async def ordered(
    parts: Sequence[P], fetch: Callable[[P, int], Awaitable[list[Any]]], limit: int
) -> list[tuple[P, Any]]:
    """Read ``parts`` in order until ``limit`` rows: a window of them at a time,
    concurrently, doubling while the window comes back sparse."""
    out: list[tuple[P, Any]] = []
    i, window = 0, 1
    while i < len(parts) and len(out) < limit:
        batch = parts[i : i + window]
        want = limit - len(out)
        pages = await asyncio.gather(*(fetch(p, want) for p in batch))
        got = 0
        for p, rows in zip(batch, pages, strict=True):
            got += len(rows)
            out.extend((p, r) for r in rows)
        i += len(batch)
        window = min(MAX_WINDOW, window * 2) if got < want // 2 else 1
    return out[:limit]
