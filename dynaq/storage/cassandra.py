"""The Cassandra store: the storage contract on Apache Cassandra 2.1 - 5.0.

The design (table layout, consistency, how scans walk lanes, why plain and
conditional writes never mix on a key) is in ``docs/storage-cassandra.md``.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from dynaq.errors import InvalidInput, StorageUnavailable
from dynaq.storage.base import LANE_SHIFT, Delete, Item, Op, Put, Store
from dynaq.storage.cassandra_layout import (
    ID_BITS,
    is_message,
    kv_part,
    msg_parts,
    msg_pos,
)
from dynaq.storage.cassandra_reads import DIR_KV, DIR_QUEUE, CassandraReads
from dynaq.storage.cassandra_schema import Statements
from dynaq.storage.cassandra_session import BatchStatement, BatchType, CassandraSession

_KEYSPACE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,47}$")
_CONDITIONAL_TRIES = 50
"""Conditional writes of one key tried before giving up to writers racing for it."""


class CassandraStore(Store):
    """:class:`~dynaq.storage.base.Store` on a Cassandra cluster (see the module docs).

    ``hosts`` are ``"host:port"`` contact points. The keyspace and tables are
    created if missing (``SimpleStrategy`` with ``replication_factor``).
    Reads and writes use ``LOCAL_QUORUM``, LWTs ``LOCAL_SERIAL``.
    """

    def __init__(
        self,
        hosts: Sequence[str] = ("127.0.0.1:9042",),
        *,
        keyspace: str = "dynaq",
        replication_factor: int = 1,
        protocol_version: int = 3,
        pool_size: int = 4,
        request_timeout_s: float = 12.0,
        connect_timeout_s: float = 10.0,
        messages_gc_grace_s: int = 900,
        expire_prefixes: Mapping[bytes, int] | None = None,
    ) -> None:
        if not _KEYSPACE.match(keyspace):
            raise InvalidInput(f"invalid Cassandra keyspace name {keyspace!r}")
        if replication_factor < 1:
            raise InvalidInput("replication_factor must be at least 1")
        self._db = CassandraSession(
            hosts,
            keyspace=keyspace,
            replication_factor=replication_factor,
            protocol_version=protocol_version,
            pool_size=pool_size,
            request_timeout_s=request_timeout_s,
            connect_timeout_s=connect_timeout_s,
            messages_gc_grace_s=messages_gc_grace_s,
        )
        # Keys (never message keys) that Cassandra expires itself: prefix -> TTL s.
        self._ttl = {k: max(1, int(v)) for k, v in (expire_prefixes or {}).items()}
        self._reads = CassandraReads(self._db)
        self._known: set[tuple[int, int]] = set()
        self._salt = random.getrandbits(10)
        self._last_us = 0

    # lifecycle -------------------------------------------------------------

    @property
    def keyspace(self) -> str:
        """The keyspace this store lives in."""
        return self._db.keyspace

    @property
    def metadata(self) -> Any:
        """The driver's cluster metadata (for schema checks)."""
        return self._db.metadata

    def replication(self) -> dict[str, str]:
        """The keyspace's live replication settings."""
        return self._db.replication()

    async def open(self) -> None:
        await self._db.open()

    async def close(self) -> None:
        self._known.clear()
        await self._db.close()

    # plumbing ----------------------------------------------------------------

    def _stmts(self) -> Statements:
        return self._db.statements

    async def _run(self, stmt: Any, params: Sequence[Any] | None = None) -> list[Any]:
        return await self._db.run(stmt, params)

    def _next_version(self) -> int:
        us = max(self._last_us + 1, time.time_ns() // 1000)
        self._last_us = us
        return (us << 10) | self._salt

    async def _note_parts(self, keys: Sequence[bytes]) -> None:
        """Record new queue numbers / first bytes in ``directory`` before writing their keys.

        Written once per process each; a scan that spans several queues or
        first bytes then reads only those that exist.
        """
        new: set[tuple[int, int]] = set()
        for k in keys:
            if is_message(k):
                new.add((DIR_QUEUE, int.from_bytes(k[1:5], "big")))
            else:
                new.add((DIR_KV, kv_part(k)[0]))
        new -= self._known
        if new:
            st = self._stmts()
            await asyncio.gather(*(self._run(st.d_add, entry) for entry in new))
            self._known |= new

    # reads -------------------------------------------------------------------

    async def get(self, key: bytes) -> Item | None:
        return (await self.get_many([key]))[0]

    async def get_many(self, keys: Sequence[bytes]) -> list[Item | None]:
        found = await self._reads.lookup(keys, with_values=True)
        return [found.get(k) for k in keys]

    async def scan(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        return await self._reads.scan(start, end, limit, with_values=True)

    async def list_keys(
        self, prefix: bytes, limit: int, start_after: bytes | None = None
    ) -> list[bytes]:
        from dynaq.storage.base import prefix_end

        start = prefix
        if start_after is not None and start_after >= prefix:
            start = start_after + b"\x00"
        end = prefix_end(prefix) if prefix else b"\xff" * 64 + b"\xff"
        return await self._reads.scan(start, end, limit, with_values=False)

    def expires_itself(self, key: bytes) -> bool:
        return self._ttl_of(key) is not None

    def _ttl_of(self, key: bytes) -> int | None:
        for prefix, ttl in self._ttl.items():
            if key.startswith(prefix) and not is_message(key):
                return ttl
        return None

    def _kv_put(self, key: bytes, value: bytes, version: int) -> tuple[Any, tuple[Any, ...]]:
        """The statement that writes a kv key: with ``USING TTL`` for an expiring prefix."""
        st = self._stmts()
        p, ck = kv_part(key)
        ttl = self._ttl_of(key)
        if ttl is None:
            return st.kv_put, (value, version, p, ck)
        return st.kv_put_ttl, (ttl, value, version, p, ck)

    async def last_key(self, start: bytes, end: bytes) -> bytes | None:
        """Within one lane of one queue, one reversed clustering read (skipping bare
        row markers); any other range falls back to the contract's scans."""
        lo, hi = msg_pos(start), msg_pos(end)
        q = lo >> ID_BITS
        if not (is_message(start) and lo < hi and (hi - 1) >> ID_BITS == q):
            return await super().last_key(start, end)
        base = q << ID_BITS
        id_lo, id_hi = lo - base, hi - 1 - base
        lane = id_lo >> LANE_SHIFT
        if id_hi >> LANE_SHIFT != lane:
            return await super().last_key(start, end)
        return await self._reads.last_in_lane(q, lane, id_lo, id_hi)

    # writes ------------------------------------------------------------------

    async def put(self, key: bytes, value: bytes) -> int:
        st = self._stmts()
        await self._note_parts([key])
        if is_message(key) or self._ttl_of(key) is not None:
            # Message ids and dedup records are written once each: nothing to order.
            v = self._next_version()
            if is_message(key):
                q, lane, mid = msg_parts(key)
                await self._run(st.m_put, (value, v, q, lane, mid))
            else:
                await self._run(*self._kv_put(key, value, v))
            return v
        return await self._put_in_order(key, value)

    async def _put_in_order(self, key: bytes, value: bytes) -> int:
        """Overwrite ``key`` through Paxos, conditional on the version just read.

        A plain ``UPDATE`` can lose to the put awaited just before it: Cassandra
        2.1 stamps each connection stream's writes from its own millisecond
        clock, so two writes of one cell in the same millisecond tie, and a tie
        keeps the greater value (measured: 1.5% of back-to-back overwrites read
        back the first value; a finished purge stayed "running"). Paxos orders
        every write of the key after the one before it, on every version, and
        matches the conditional deletes of these keys.
        """
        for _ in range(_CONDITIONAL_TRIES):
            item = await self.get(key)
            if item is None:
                v = await self.put_if_absent(key, value)
            else:
                v = await self.put_if_version(key, value, item.version)
            if v is not None:
                return v
        raise StorageUnavailable(f"put of {key!r} kept losing to concurrent writes")

    async def put_if_absent(self, key: bytes, value: bytes) -> int | None:
        st = self._stmts()
        await self._note_parts([key])
        v = self._next_version()
        if is_message(key):
            q, lane, mid = msg_parts(key)
            rows = await self._run(st.m_put_new, (q, lane, mid, value, v))
            if rows and not rows[0][0] and rows[0][-1] is None:  # a bare marker: absent
                rows = await self._run(st.m_put_bare, (value, v, q, lane, mid))
        else:
            p, ck = kv_part(key)
            rows = await self._run(st.kv_put_new, (p, ck, value, v))
            if rows and not rows[0][0] and rows[0][-1] is None:
                rows = await self._run(st.kv_put_bare, (value, v, p, ck))
        return v if rows and rows[0][0] else None

    async def put_if_version(self, key: bytes, value: bytes, version: int) -> int | None:
        st = self._stmts()
        v = max(self._next_version(), version + 1)
        if is_message(key):
            q, lane, mid = msg_parts(key)
            rows = await self._run(st.m_put_ver, (value, v, q, lane, mid, version))
        else:
            p, ck = kv_part(key)
            rows = await self._run(st.kv_put_ver, (value, v, p, ck, version))
        return v if rows and rows[0][0] else None

    async def delete(self, key: bytes) -> bool:
        if is_message(key):
            return (await self.write_batch([Delete(key)]))[0]
        # Conditional on the version just read, so it is a Paxos write like
        # the conditional puts of the same keys (Cassandra 2.1 has no
        # ``IF version > 0``, and ``IF EXISTS`` would count a bare row marker).
        p, ck = kv_part(key)
        for _ in range(_CONDITIONAL_TRIES):
            item = await self.get(key)
            if item is None:
                return False
            rows = await self._run(self._stmts().kv_del_ver, (p, ck, item.version))
            if rows and rows[0][0]:
                return True
        raise StorageUnavailable(f"delete of {key!r} kept losing to concurrent writes")

    async def write_batch(self, ops: Sequence[Op]) -> list[bool]:
        if not ops:
            self._stmts()
            return []
        st = self._stmts()
        dels = [op.key for op in ops if isinstance(op, Delete)]
        existing = await self._reads.lookup(dels, with_values=False) if dels else {}
        await self._note_parts([op.key for op in ops if isinstance(op, Put)])
        # Ops apply in order: a later op on a key replaces an earlier one
        # (in one batch they would share a timestamp, and a tombstone wins ties).
        exists: dict[bytes, bool] = {}
        last: dict[bytes, Op] = {}
        results: list[bool] = []
        for op in ops:
            if isinstance(op, Put):
                results.append(True)
                exists[op.key] = True
            else:
                results.append(exists.get(op.key, op.key in existing))
                exists[op.key] = False
            last.pop(op.key, None)
            last[op.key] = op
        stmts: list[tuple[Any, tuple[Any, ...]]] = []
        parts: set[tuple[Any, ...]] = set()
        for op in last.values():
            if is_message(op.key):
                q, lane, mid = msg_parts(op.key)
                parts.add((q, lane))
                if isinstance(op, Put):
                    stmts.append((st.m_put, (op.value, self._next_version(), q, lane, mid)))
                else:
                    stmts.append((st.m_del, (q, lane, mid)))
            else:
                p, ck = kv_part(op.key)
                parts.add((p,))
                if isinstance(op, Put):
                    stmts.append(self._kv_put(op.key, op.value, self._next_version()))
                else:
                    stmts.append((st.kv_del, (p, ck)))
        await self._apply(stmts, logged=len(parts) > 1)
        return results

    async def _apply(self, stmts: list[tuple[Any, tuple[Any, ...]]], *, logged: bool) -> None:
        if len(stmts) == 1:
            await self._run(*stmts[0])
            return
        batch = BatchStatement(batch_type=BatchType.LOGGED if logged else BatchType.UNLOGGED)
        for stmt, params in stmts:
            batch.add(stmt, params)
        await self._run(batch)

    async def delete_range(self, start: bytes, end: bytes, chunk: int = 10_000) -> int:
        """Delete ``[start, end)`` chunk by chunk, one batch per partition (not atomic)."""
        removed = 0
        while True:
            keys = await self._reads.scan(start, end, chunk, with_values=False)
            if not keys:
                return removed
            by_part: dict[tuple[Any, ...], list[Op]] = {}
            for k in keys:
                part = msg_parts(k)[:2] if is_message(k) else (kv_part(k)[0],)
                by_part.setdefault(part, []).append(Delete(k))
            st = self._stmts()
            calls = []
            for part_ops in by_part.values():
                stmts: list[tuple[Any, tuple[Any, ...]]] = []
                for op in part_ops:
                    if is_message(op.key):
                        q, lane, mid = msg_parts(op.key)
                        stmts.append((st.m_del, (q, lane, mid)))
                    else:
                        stmts.append((st.kv_del, kv_part(op.key)))
                calls.append(self._apply(stmts, logged=False))
            await asyncio.gather(*calls)
            removed += len(keys)
            start = keys[-1] + b"\x00"


__all__ = ["CassandraStore"]
