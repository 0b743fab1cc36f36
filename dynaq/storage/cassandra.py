"""The Cassandra store: the storage contract on Apache Cassandra 2.1 - 5.0.

The design (table layout, consistency, how scans walk lanes, why plain and
conditional writes never mix on a key) is in ``docs/storage-cassandra.md``.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from dynaq.errors import InvalidInput, StorageUnavailable
from dynaq.storage.base import LANE_SHIFT, Delete, Item, Op, Put, Store
from dynaq.storage.cassandra_layout import (
    ID_BITS,
    ID_MASK,
    after_blob,
    after_id,
    is_message,
    kv_part,
    live,
    msg_key,
    msg_parts,
    msg_pos,
    ordered,
    row_key,
    same_key,
)
from dynaq.storage.cassandra_schema import Statements
from dynaq.storage.cassandra_session import BatchStatement, BatchType, CassandraSession

_KEYSPACE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,47}$")
_DIR_QUEUE = 0  # directory kinds
_DIR_KV = 1
_IN_CHUNK = 100  # keys per ``IN`` read
_DELETE_TRIES = 50


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
                new.add((_DIR_QUEUE, int.from_bytes(k[1:5], "big")))
            else:
                new.add((_DIR_KV, kv_part(k)[0]))
        new -= self._known
        if new:
            st = self._stmts()
            await asyncio.gather(*(self._run(st.d_add, entry) for entry in new))
            self._known |= new

    async def _listed(self, kind: int, lo: int, hi: int) -> list[int]:
        rows = await self._run(self._stmts().d_list, (kind, lo, hi))
        return sorted(r[0] for r in rows)

    # reads -------------------------------------------------------------------

    async def get(self, key: bytes) -> Item | None:
        return (await self.get_many([key]))[0]

    async def get_many(self, keys: Sequence[bytes]) -> list[Item | None]:
        found = await self._lookup(keys, with_values=True)
        return [found.get(k) for k in keys]

    async def _lookup(self, keys: Sequence[bytes], *, with_values: bool) -> dict[bytes, Any]:
        """Fetch ``keys`` grouped by partition with ``IN``; map key -> Item (or True)."""
        st = self._stmts()
        groups: dict[tuple[Any, ...], list[Any]] = {}
        for k in dict.fromkeys(keys):
            if is_message(k):
                q, lane, mid = msg_parts(k)
                groups.setdefault((True, q, lane), []).append(mid)
            else:
                p, ck = kv_part(k)
                groups.setdefault((False, p), []).append(ck)
        calls: list[Awaitable[list[Any]]] = []
        metas: list[tuple[Any, ...]] = []
        for g, cks in groups.items():
            for i in range(0, len(cks), _IN_CHUNK):
                chunk = cks[i : i + _IN_CHUNK]
                if g[0]:
                    stmt = st.m_get if with_values else st.m_ver
                    calls.append(self._run(stmt, (g[1], g[2], chunk)))
                else:
                    stmt = st.kv_get if with_values else st.kv_ver
                    calls.append(self._run(stmt, (g[1], chunk)))
                metas.append(g)
        out: dict[bytes, Any] = {}
        for g, rows in zip(metas, await asyncio.gather(*calls), strict=True):
            for row in rows:
                if row[-1] is None:
                    continue  # a bare row marker: absent
                k = msg_key(g[1], row[0]) if g[0] else (row[0] if g[1] >= 0 else b"")
                out[k] = Item(row[1] or b"", row[2]) if with_values else True
        return out

    async def scan(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        return await self._scan(start, end, limit, with_values=True)

    async def list_keys(
        self, prefix: bytes, limit: int, start_after: bytes | None = None
    ) -> list[bytes]:
        from dynaq.storage.base import prefix_end

        start = prefix
        if start_after is not None and start_after >= prefix:
            start = start_after + b"\x00"
        end = prefix_end(prefix) if prefix else b"\xff" * 64 + b"\xff"
        return await self._scan(start, end, limit, with_values=False)

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
        stmt, page = self._stmts().m_last, 16
        while id_hi >= id_lo:
            rows = await self._run(stmt, (q, lane, id_lo, id_hi, page))
            for row in rows:
                if row[-1] is not None:
                    return msg_key(q, row[0])
            if len(rows) < page:
                return None
            id_hi = rows[-1][0] - 1
        return None

    async def _scan(self, start: bytes, end: bytes, limit: int, *, with_values: bool) -> list[Any]:
        if limit <= 0 or start >= end:
            return []
        self._stmts()
        lo, hi = msg_pos(start), msg_pos(end)
        # Message keys and other keys live in different tables: read both, merge.
        kv_rows, m_rows = await asyncio.gather(
            self._scan_kv(start, end, limit, with_values),
            self._scan_messages(lo, hi, limit, with_values) if lo < hi else _nothing(),
        )
        if not m_rows:
            return kv_rows[:limit]
        if not kv_rows:
            return m_rows[:limit]
        rows = sorted([*kv_rows, *m_rows], key=row_key if with_values else same_key)
        return rows[:limit]

    async def _scan_kv(self, start: bytes, end: bytes, limit: int, with_values: bool) -> list[Any]:
        st = self._stmts()
        first = start[0] if start else -1  # the empty key (partition -1) sorts first
        last = end[0] - 1 if len(end) == 1 else end[0]  # end == bytes([b]) excludes b's keys
        parts = [first] if first == last else await self._listed(_DIR_KV, first, last)

        def fetch(p: int, n: int) -> Awaitable[list[Any]]:
            if p == -1:
                stmt = st.kv_get if with_values else st.kv_ver
                return live(lambda lo, m: self._run(stmt, (-1, [b"\x00"])), b"", n, after_blob)
            bounded = end[0] == p if end else False
            if with_values:
                stmt = st.kv_scan if bounded else st.kv_scan_open
            else:
                stmt = st.kv_keys if bounded else st.kv_keys_open

            def run(lo: bytes, m: int) -> Awaitable[list[Any]]:
                return self._run(stmt, (p, lo, end, m) if bounded else (p, lo, m))

            return live(run, max(start, bytes([p])), n, after_blob)

        rows = await ordered(parts, fetch, limit)
        if with_values:
            return [(b"" if k == b"\x00" and p == -1 else k, v or b"") for p, (k, v, *_) in rows]
        return [b"" if p == -1 else r[0] for p, r in rows]

    async def _scan_messages(self, lo: int, hi: int, limit: int, with_values: bool) -> list[Any]:
        st = self._stmts()
        q_lo, q_hi = lo >> ID_BITS, (hi - 1) >> ID_BITS
        if q_lo == q_hi:
            queues = [q_lo]
        else:
            queues = await self._listed(_DIR_QUEUE, q_lo, min(q_hi, (1 << 32) - 1))
        parts: list[tuple[int, int]] = []
        for q in queues:
            base = q << ID_BITS
            first = max(lo - base, 0) >> LANE_SHIFT
            last = min(hi - 1 - base, ID_MASK) >> LANE_SHIFT
            parts.extend((q, lane) for lane in range(first, last + 1))

        def fetch(part: tuple[int, int], n: int) -> Awaitable[list[Any]]:
            q, lane = part
            base = q << ID_BITS
            id_lo = max(lo - base, lane << LANE_SHIFT)
            id_last = min(hi - base, (lane + 1) << LANE_SHIFT) - 1  # inclusive: 2^63 overflows
            stmt = st.m_scan if with_values else st.m_keys

            def run(first: int, m: int) -> Awaitable[list[Any]]:
                return self._run(stmt, (q, lane, first, id_last, m))

            return live(run, id_lo, n, after_id)

        rows = await ordered(parts, fetch, limit)
        if with_values:
            return [(msg_key(part[0], r[0]), r[1] or b"") for part, r in rows]
        return [msg_key(part[0], r[0]) for part, r in rows]

    # writes ------------------------------------------------------------------

    async def put(self, key: bytes, value: bytes) -> int:
        st = self._stmts()
        await self._note_parts([key])
        v = self._next_version()
        if is_message(key):
            q, lane, mid = msg_parts(key)
            await self._run(st.m_put, (value, v, q, lane, mid))
        else:
            await self._run(*self._kv_put(key, value, v))
        return v

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
        for _ in range(_DELETE_TRIES):
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
        existing = await self._lookup(dels, with_values=False) if dels else {}
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
            keys = await self._scan(start, end, chunk, with_values=False)
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


async def _nothing() -> list[Any]:
    return []


__all__ = ["CassandraStore"]
