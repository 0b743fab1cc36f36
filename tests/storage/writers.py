"""Helpers for the tests of the embedded store's writer processes."""

from __future__ import annotations

import asyncio

from dynaq.errors import StorageUnavailable
from dynaq.storage.embedded import LmdbStore


async def until_writes_succeed(store: LmdbStore, deadline_s: float = 10.0) -> None:
    """Write until a write succeeds (a new writer process took over), at most ``deadline_s``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while True:
        try:
            await store.put(b"probe", b"v")
            return
        except StorageUnavailable:
            assert loop.time() < end, "no new writer process took over"
            await asyncio.sleep(0.05)
