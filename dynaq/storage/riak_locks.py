"""Per-key locks of one process: the Riak store serialises its own writes of a key,
so only writers in different processes ever race (and meet as siblings)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class KeyLocks:
    """An :class:`asyncio.Lock` per key, kept only while someone holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[bytes, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: bytes) -> AsyncIterator[None]:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)
