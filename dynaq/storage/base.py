"""The KV storage contract every dynaq algorithm is written against.

A store maps byte keys to byte values, ordered by key. Each value carries a
``version`` (an opaque, per-key-unique integer that changes on every write) so
that callers can do optimistic concurrency with :meth:`Store.put_if_version`.

Guarantees every backend gives:

* A write is durable when its coroutine returns.
* :meth:`Store.write_batch` applies all of its operations or none of them.
* :meth:`Store.scan` returns keys in ascending byte order, ``start`` inclusive,
  ``end`` exclusive, at most ``limit`` of them.
* Conditional puts are linearizable per key.
* A message key (see the key shape below) is written once: ids are never
  reused (the domain guarantees it), so backends need not order a re-put
  after a delete of the same message key.

Backends translate their driver's exceptions into
:class:`dynaq.errors.StorageError` subclasses at this boundary.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True, slots=True)
class Item:
    """A stored value and its version."""

    value: bytes
    version: int


class Put(NamedTuple):
    """Write ``value`` under ``key`` (inside :meth:`Store.write_batch`).

    A named tuple, not a dataclass: batches build one per message on the hot
    path, and tuples are several times cheaper to create.
    """

    key: bytes
    value: bytes


class Delete(NamedTuple):
    """Remove ``key`` (inside :meth:`Store.write_batch`)."""

    key: bytes


Op = Put | Delete


# The message key shape: the one layout fact backends may rely on. Messages
# are ``MESSAGE_PREFIX`` + queue number (4 bytes) + id (8 bytes), all
# big-endian, and an id's top ``LANE_BITS`` bits (from ``LANE_SHIFT``) are its
# lane. The domain (``dynaq.core.keys``/``ids``) builds keys from these
# constants; a backend that partitions by lane (Cassandra) reads them from here,
# so the shape is declared once.
MESSAGE_PREFIX = b"m"
MESSAGE_KEY_LEN = 13
LANE_BITS = 10
LANE_SHIFT = 53
ID_TIME_SHIFT = 13
"""An id's bits from here up to the lane hold wall milliseconds since ``ID_EPOCH_MS``."""
ID_TIME_BITS = 40
ID_EPOCH_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z


def is_message_key(key: bytes) -> bool:
    """Whether ``key`` has the message key shape (backends that count messages)."""
    return len(key) == MESSAGE_KEY_LEN and key[:1] == MESSAGE_PREFIX


class Store(abc.ABC):
    """An ordered, durable key-value store with range scans."""

    records_settle_in_batches: bool = False
    """Whether a record written inside :meth:`write_batch` is ordered with the
    single puts of that key before and after it, exactly as a :meth:`put` would
    be, so a batch may carry the state record of the work it applies. True on
    one LMDB environment and in memory. False on Cassandra (a batch is not the
    Paxos write that orders a record's puts) and on Riak (a batch cut short is
    finished later from its journal, and could then put an old record back):
    there such a record is written on its own, after the batch."""

    async def open(self) -> None:  # noqa: B027 - optional hook, default does nothing
        """Prepare the store (create files, connect). Idempotent."""

    async def close(self) -> None:  # noqa: B027 - optional hook, default does nothing
        """Finish pending writes and release resources."""

    @abc.abstractmethod
    async def get(self, key: bytes) -> Item | None:
        """Return the item under ``key``, or ``None``."""

    @abc.abstractmethod
    async def get_many(self, keys: Sequence[bytes]) -> list[Item | None]:
        """Return the items under ``keys``, in order, ``None`` where absent."""

    @abc.abstractmethod
    async def put(self, key: bytes, value: bytes) -> int:
        """Write ``value`` under ``key`` unconditionally; return the new version."""

    @abc.abstractmethod
    async def put_if_absent(self, key: bytes, value: bytes) -> int | None:
        """Write only if ``key`` is absent; return the new version, or ``None``."""

    @abc.abstractmethod
    async def put_if_version(self, key: bytes, value: bytes, version: int) -> int | None:
        """Write only if ``key`` currently has ``version``; return the new version or ``None``."""

    @abc.abstractmethod
    async def delete(self, key: bytes) -> bool:
        """Remove ``key``; return whether it existed."""

    @abc.abstractmethod
    async def write_batch(self, ops: Sequence[Op]) -> list[bool]:
        """Apply every op atomically.

        Returns one flag per op: ``True`` for a put; for a delete, whether the
        key existed.
        """

    @abc.abstractmethod
    async def scan(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """Return up to ``limit`` ``(key, value)`` pairs with ``start <= key < end``, ascending."""

    @abc.abstractmethod
    async def list_keys(
        self, prefix: bytes, limit: int, start_after: bytes | None = None
    ) -> list[bytes]:
        """Return up to ``limit`` keys that begin with ``prefix``, ascending, after ``start_after``."""

    async def migrate_schema(self) -> bool:
        """Create or update what the backend needs on its server (``dynaq migrate``
        and every node start call it); return whether anything changed. Backends
        that set themselves up in :meth:`open` keep this default."""
        return False

    async def message_counts(self, queue_numbers: Sequence[int]) -> list[int] | None:
        """How many message keys each of ``queue_numbers`` has now, in order, or
        ``None`` when this backend keeps no such counts (Cassandra, Riak: callers
        count what passes through them).

        Exact where given: the count of a queue changes in the same atomic write
        as its message keys (LMDB, memory), so it is the number of messages the
        store holds as of one read, whichever process wrote them.
        """
        return None

    def expires_itself(self, key: bytes) -> bool:
        """Whether the store removes ``key`` by itself a set time after each write,
        timed by the store's own clock (callers then trust a present key instead
        of comparing their clocks). ``False`` unless a backend was told so."""
        return False

    async def last_key(self, start: bytes, end: bytes) -> bytes | None:
        """The greatest key ``k`` with ``start <= k < end``, or ``None``.

        This default pages through :meth:`list_keys`-like scans; backends answer
        from an index in one step (LMDB's cursor, Cassandra's reversed clustering
        order within one lane).
        """
        last: bytes | None = None
        page = 1000
        while start < end:
            rows = await self.scan(start, end, page)
            if not rows:
                break
            last = rows[-1][0]
            if len(rows) < page:
                break
            start = last + b"\x00"
        return last

    async def last_keys(self, ranges: Sequence[tuple[bytes, bytes]]) -> list[bytes | None]:
        """:meth:`last_key` of every ``(start, end)`` range, in order.

        This default asks for them concurrently; LMDB overrides it to answer
        them all in one read transaction (one thread hop, not one per range).
        """
        return list(await asyncio.gather(*(self.last_key(s, e) for s, e in ranges)))

    async def delete_range(self, start: bytes, end: bytes, chunk: int = 10_000) -> int:
        """Delete every key in ``[start, end)`` in chunks; return how many were removed.

        Not atomic as a whole: each chunk is one batch. Used for purging a
        deleted queue's messages in the background.
        """
        removed = 0
        while True:
            rows = await self.scan(start, end, chunk)
            if not rows:
                return removed
            await self.write_batch([Delete(k) for k, _ in rows])
            removed += len(rows)
            start = rows[-1][0] + b"\x00"


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix``."""
    b = bytearray(prefix)
    while b:
        if b[-1] < 0xFF:
            b[-1] += 1
            return bytes(b)
        b.pop()
    return b"\xff" * 64
