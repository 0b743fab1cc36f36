"""What batch tracking stores and reports: headers, exact-mode blocks, completions.

A header is one msgpack array and a block is ``[upto, bitfield]`` (bit ``i``
set = item ``i`` not yet acked, little-endian); both formats are stored, so
they change only with a migration.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgpack

from dynaq.errors import StorageError

EXACT = "exact"
ESTIMATED = "estimated"

BLOCK_ITEMS = 4096
"""Items per stored block: a 512-byte bitfield, small enough that concurrent
acks of one block rarely conflict, large enough that 1M items take 245 records."""


@dataclass(frozen=True)
class Completion:
    """A batch that just became complete."""

    batch_id: int
    user_key: str | None
    completed_ms: int


CompletionListener = Callable[[Completion], Awaitable[None]]


@dataclass
class BatchHeader:
    """A batch's header record."""

    mode: str
    user_key: str | None
    closed: bool = False
    complete: bool = False
    pending: int = 0
    """Exact: blocks with a bit still set. Estimated: the counter."""
    items: int = 0
    created_ms: int = 0
    updated_ms: int = 0
    completed_ms: int = 0

    def encode(self) -> bytes:
        return bytes(
            msgpack.packb(
                [
                    self.mode,
                    self.user_key,
                    self.closed,
                    self.complete,
                    self.pending,
                    self.items,
                    self.created_ms,
                    self.updated_ms,
                    self.completed_ms,
                ]
            )
        )

    @classmethod
    def decode(cls, raw: bytes) -> BatchHeader:
        try:
            return cls(*msgpack.unpackb(raw))
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise StorageError(f"corrupt batch header: {exc}") from exc


def encode_block(upto: int, bits: int) -> bytes:
    """A block of ``upto`` items whose unacked items are the set bits of ``bits``."""
    return bytes(msgpack.packb([upto, bits.to_bytes((upto + 7) // 8, "little")]))


def decode_block(raw: bytes) -> tuple[int, int]:
    """``(upto, bits)`` of a stored block."""
    try:
        upto, bits = msgpack.unpackb(raw)
        return int(upto), int.from_bytes(bits, "little")
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise StorageError(f"corrupt batch block: {exc}") from exc
