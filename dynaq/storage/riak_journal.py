"""The Riak store's batch journal: all of a batch's ops, or (after a replay) all of them.

Riak has no multi-key transaction. A batch that touches several keys is first
written as one journal object (every op, in order), then applied key by key
(concurrently), then its journal object is deleted. A writer that dies in
between leaves the journal object behind; :meth:`Journal.replay` (run by every
:meth:`RiakStore.open`) applies the ones older than ``replay_after_s`` again,
so a batch ends up applied whole. Re-applying is safe: puts write the same
bytes, deletes of absent keys do nothing. The one visible effect: a message a
consumer deleted between the crash and the replay is written again, a
duplicate delivery, which the queue's at-least-once guarantee allows.
Readers may see a batch half-applied while it is being applied (as with
Cassandra's logged batches: atomic, not isolated).
"""

from __future__ import annotations

import secrets
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager

from dynaq.errors import StorageError
from dynaq.storage.base import Delete, Op, Put
from dynaq.storage.riak_http import RiakHttp

_MAGIC = b"J1"
_LEN = struct.Struct(">I")
_PAGE = 500


def encode(ops: Sequence[Op]) -> bytes:
    out = [_MAGIC]
    for op in ops:
        if isinstance(op, Put):
            out += [b"P", _LEN.pack(len(op.key)), op.key, _LEN.pack(len(op.value)), op.value]
        else:
            out += [b"D", _LEN.pack(len(op.key)), op.key]
    return b"".join(out)


def decode(data: bytes) -> list[Op]:
    if not data.startswith(_MAGIC):
        raise StorageError("a Riak batch journal entry is not in a format this dynaq reads")
    ops: list[Op] = []
    i = len(_MAGIC)
    while i < len(data):
        kind = data[i : i + 1]
        (n,) = _LEN.unpack_from(data, i + 1)
        key = data[i + 5 : i + 5 + n]
        i += 5 + n
        if kind == b"P":
            (m,) = _LEN.unpack_from(data, i)
            ops.append(Put(key, data[i + 4 : i + 4 + m]))
            i += 4 + m
        else:
            ops.append(Delete(key))
    return ops


class Journal:
    """Journal entries in one bucket, named ``<ns since 1970, hex><random>``."""

    def __init__(self, db: RiakHttp, bucket: str, replay_after_s: float) -> None:
        self._db = db
        self.bucket = bucket
        self._after_ns = int(replay_after_s * 1e9)

    @asynccontextmanager
    async def entry(self, ops: Sequence[Op]) -> AsyncIterator[None]:
        """Journal ``ops`` while the body applies them; the entry is removed only
        when the body succeeded (else a replay finishes the batch)."""
        name = f"{time.time_ns():016x}{secrets.token_hex(6)}"
        await self._db.store(self.bucket, name, encode(ops))
        yield
        await self._db.remove(self.bucket, name)

    async def replay(self, apply: Callable[[Sequence[Op]], Awaitable[object]]) -> int:
        """Apply every entry older than ``replay_after_s`` again and remove it; return how many."""
        newest = f"{max(0, time.time_ns() - self._after_ns):016x}"
        done = 0
        cont: str | None = None
        while True:
            names, cont = await self._db.index_page(self.bucket, "$key", "0", newest, _PAGE, cont)
            for name in names:
                obj = await self._db.fetch(self.bucket, name)
                live = obj.live
                if live:
                    await apply(decode(live[0].value))
                    done += 1
                await self._db.remove(self.bucket, name)
            if not cont or not names:
                return done
