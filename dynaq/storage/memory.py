"""An in-memory twin of the storage contract, for fast tests and experiments.

Not durable. Same semantics as the embedded store, checked by the same
contract suite.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

from dynaq.errors import StorageUnavailable
from dynaq.storage.base import Delete, Item, Op, Put, Store, is_message_key


class MemoryStore(Store):
    """A sorted dict in process memory."""

    records_settle_in_batches = True

    def __init__(self) -> None:
        self._keys: list[bytes] = []
        self._data: dict[bytes, Item] = {}
        self._versions = itertools.count(1)
        self._closed = False
        self._counts: dict[bytes, int] = {}
        """Message keys per queue (the 4 bytes after the prefix), as LMDB keeps them."""

    def _check(self) -> None:
        if self._closed:
            raise StorageUnavailable("store is closed")

    async def open(self) -> None:
        self._closed = False

    async def close(self) -> None:
        self._closed = True

    def _set(self, key: bytes, value: bytes) -> int:
        version = next(self._versions)
        if key not in self._data:
            bisect.insort(self._keys, key)
            if is_message_key(key):
                self._count(key, 1)
        self._data[key] = Item(bytes(value), version)
        return version

    def _remove(self, key: bytes) -> bool:
        if key not in self._data:
            return False
        del self._data[key]
        i = bisect.bisect_left(self._keys, key)
        del self._keys[i]
        if is_message_key(key):
            self._count(key, -1)
        return True

    def _count(self, key: bytes, n: int) -> None:
        q = key[1:5]
        total = self._counts.get(q, 0) + n
        if total:
            self._counts[q] = total
        else:
            self._counts.pop(q, None)

    async def message_counts(self, queue_numbers: Sequence[int]) -> list[int]:
        self._check()
        return [self._counts.get(n.to_bytes(4, "big"), 0) for n in queue_numbers]

    async def get(self, key: bytes) -> Item | None:
        self._check()
        return self._data.get(key)

    async def get_many(self, keys: Sequence[bytes]) -> list[Item | None]:
        self._check()
        return [self._data.get(k) for k in keys]

    async def put(self, key: bytes, value: bytes) -> int:
        self._check()
        return self._set(key, value)

    async def put_if_absent(self, key: bytes, value: bytes) -> int | None:
        self._check()
        if key in self._data:
            return None
        return self._set(key, value)

    async def put_if_version(self, key: bytes, value: bytes, version: int) -> int | None:
        self._check()
        current = self._data.get(key)
        if current is None or current.version != version:
            return None
        return self._set(key, value)

    async def delete(self, key: bytes) -> bool:
        self._check()
        return self._remove(key)

    async def write_batch(self, ops: Sequence[Op]) -> list[bool]:
        self._check()
        results: list[bool] = []
        for op in ops:
            if isinstance(op, Put):
                self._set(op.key, op.value)
                results.append(True)
            elif isinstance(op, Delete):
                results.append(self._remove(op.key))
        return results

    async def last_key(self, start: bytes, end: bytes) -> bytes | None:
        self._check()
        i = bisect.bisect_left(self._keys, end) - 1
        return self._keys[i] if i >= 0 and self._keys[i] >= start else None

    async def scan(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        self._check()
        i = bisect.bisect_left(self._keys, start)
        out: list[tuple[bytes, bytes]] = []
        while i < len(self._keys) and len(out) < limit:
            k = self._keys[i]
            if k >= end:
                break
            out.append((k, self._data[k].value))
            i += 1
        return out

    async def list_keys(
        self, prefix: bytes, limit: int, start_after: bytes | None = None
    ) -> list[bytes]:
        self._check()
        if start_after is not None and start_after >= prefix:
            i = bisect.bisect_right(self._keys, start_after)
        else:
            i = bisect.bisect_left(self._keys, prefix)
        out: list[bytes] = []
        while i < len(self._keys) and len(out) < limit:
            k = self._keys[i]
            if not k.startswith(prefix):
                break
            out.append(k)
            i += 1
        return out
