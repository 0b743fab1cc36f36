"""What batch tracking stores and reports: headers, exact-mode blocks, traces, completions.

Every record is one msgpack array. Formats only grow at the end, and a
decoder fills what an older record lacks, so records written by earlier
releases still decode:

* header: ``[mode, user_key, closed, complete, pending, items, created_ms,
  updated_ms, completed_ms]`` then (since the crash-window fixes) ``removing,
  announced, retiring, adds``. A 9-element header is read with ``removing``
  false, ``announced`` = ``complete`` (its completion was published, or lost,
  by the release that wrote it), nothing retiring and no add in flight.
* block: ``[upto, bitfield]`` then ``retired, last_ack_ms``. A 2-element block
  is read as retired exactly when its bitfield is empty (the release that
  wrote it subtracted a block from ``pending`` when its last bit cleared) and
  as never acked (``last_ack_ms`` 0).
* repair marker (``b/r/...``): ``[created_ms, [block ids]]``.
* completion record (``b/c/...``): ``[batch_id, user_key, completed_ms, created_ms]``.

Nodes of an earlier release cannot decode the longer header and block records
(they unpack a fixed number of fields): upgrade every node before the new one
writes batch records.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

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


def _unpack(raw: bytes, what: str) -> list[Any]:
    try:
        value = msgpack.unpackb(raw)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise StorageError(f"corrupt {what}: {exc}") from exc
    if not isinstance(value, list):
        raise StorageError(f"corrupt {what}: not an array")
    return value


@dataclass
class AddIntent:
    """An add of items in flight: its blocks may exist but are not counted yet.

    The blocks' ids follow from ``add_id`` (:func:`block_ids`), so the intent
    stays small however many blocks the add writes.
    """

    add_id: bytes
    count: int
    started_ms: int

    def blocks(self) -> list[tuple[uuid.UUID, int]]:
        """The add's blocks ``(id, upto)``."""
        return block_ids(self.add_id, block_sizes(self.count))


@dataclass
class BatchHeader:
    """A batch's header record."""

    mode: str
    user_key: str | None
    closed: bool = False
    complete: bool = False
    pending: int = 0
    """Exact: blocks not yet retired (a bit still set, or emptied but not yet
    subtracted). Estimated: the counter."""
    items: int = 0
    created_ms: int = 0
    updated_ms: int = 0
    completed_ms: int = 0
    removing: bool = False
    """The batch is being deleted: it reads as absent and takes no updates."""
    announced: bool = False
    """The completion went to every listener (meaningful once ``complete``)."""
    retiring: list[uuid.UUID] = field(default_factory=list)
    """Exact: ids of blocks already subtracted from ``pending`` whose block
    record is not yet marked retired; they are never subtracted again."""
    adds: list[AddIntent] = field(default_factory=list)
    """Exact: adds in flight. A batch with one never completes."""
    publish_claim: tuple[str, int] | None = None
    """Who publishes the completion event, and until when (wall ms): one node at a time."""

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
                    self.removing,
                    self.announced,
                    [b.bytes for b in self.retiring],
                    [[a.add_id, a.count, a.started_ms] for a in self.adds],
                    None if self.publish_claim is None else list(self.publish_claim),
                ]
            )
        )

    @classmethod
    def decode(cls, raw: bytes) -> BatchHeader:
        f = _unpack(raw, "batch header")
        try:
            h = cls(*f[:9])
            if len(f) >= 13:
                h.removing = bool(f[9])
                h.announced = bool(f[10])
                h.retiring = [uuid.UUID(bytes=bytes(b)) for b in f[11]]
                h.adds = [AddIntent(bytes(a), int(c), int(t)) for a, c, t in f[12]]
            else:
                h.announced = h.complete
            if len(f) >= 14 and f[13] is not None:
                h.publish_claim = (str(f[13][0]), int(f[13][1]))
        except (ValueError, TypeError) as exc:
            raise StorageError(f"corrupt batch header: {exc}") from exc
        return h


@dataclass
class Block:
    """An exact batch's block: ``upto`` items, the set bits of ``bits`` not yet acked."""

    upto: int
    bits: int
    retired: bool = False
    """Subtracted from the header's ``pending`` (only ever once its bits are all clear)."""
    last_ack_ms: int = 0
    """Wall ms of the last write that cleared bits (activity the reaper respects)."""

    @property
    def emptied(self) -> bool:
        """Every item acked, but not yet subtracted from the header's count."""
        return self.bits == 0 and not self.retired

    def encode(self) -> bytes:
        bitfield = self.bits.to_bytes((self.upto + 7) // 8, "little")
        return bytes(msgpack.packb([self.upto, bitfield, self.retired, self.last_ack_ms]))

    @classmethod
    def decode(cls, raw: bytes) -> Block:
        f = _unpack(raw, "batch block")
        try:
            upto, bits = int(f[0]), int.from_bytes(f[1], "little")
            if len(f) >= 4:
                return cls(upto, bits, bool(f[2]), int(f[3]))
            return cls(upto, bits, retired=bits == 0)
        except (ValueError, TypeError, IndexError) as exc:
            raise StorageError(f"corrupt batch block: {exc}") from exc


def block_sizes(count: int) -> list[int]:
    """The ``upto`` of each block ``count`` items are added in."""
    sizes = [BLOCK_ITEMS] * (count // BLOCK_ITEMS)
    if count % BLOCK_ITEMS:
        sizes.append(count % BLOCK_ITEMS)
    return sizes


def block_ids(add_id: bytes, sizes: Iterable[int]) -> list[tuple[uuid.UUID, int]]:
    """The blocks of one add: ids derived from ``add_id`` (random, 16 bytes) and the
    block's position, so an interrupted add's blocks can be found and removed."""
    out: list[tuple[uuid.UUID, int]] = []
    for i, n in enumerate(sizes):
        digest = hashlib.blake2b(add_id + i.to_bytes(4, "big"), digest_size=16).digest()
        out.append((uuid.UUID(bytes=digest, version=4), n))
    return out


def encode_marker(created_ms: int, blocks: Iterable[uuid.UUID]) -> bytes:
    return bytes(msgpack.packb([created_ms, [b.bytes for b in blocks]]))


def decode_marker(raw: bytes) -> tuple[int, list[uuid.UUID]]:
    """``(created_ms, block ids)`` of a repair marker."""
    f = _unpack(raw, "batch repair marker")
    try:
        return int(f[0]), [uuid.UUID(bytes=bytes(b)) for b in f[1]]
    except (ValueError, TypeError, IndexError) as exc:
        raise StorageError(f"corrupt batch repair marker: {exc}") from exc


def encode_completion(done: Completion, created_ms: int) -> bytes:
    return bytes(msgpack.packb([done.batch_id, done.user_key, done.completed_ms, created_ms]))


def decode_completion(raw: bytes) -> tuple[Completion, int]:
    """``(completion, created_ms)`` of a completion record."""
    f = _unpack(raw, "batch completion record")
    try:
        return Completion(int(f[0]), f[1], int(f[2])), int(f[3])
    except (ValueError, TypeError, IndexError) as exc:
        raise StorageError(f"corrupt batch completion record: {exc}") from exc
