"""The Cassandra store's reads: point lookups grouped by partition, and ordered scans
that walk message lanes and kv partitions (see ``docs/storage-cassandra.md``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any

from dynaq.storage.base import LANE_SHIFT, Item
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
from dynaq.storage.cassandra_session import CassandraSession

DIR_QUEUE = 0  # directory kinds
DIR_KV = 1
_IN_CHUNK = 100  # keys per ``IN`` read


class CassandraReads:
    """Every read of one :class:`~dynaq.storage.cassandra.CassandraStore`."""

    def __init__(self, db: CassandraSession) -> None:
        self._db = db

    def _stmts(self) -> Statements:
        return self._db.statements

    async def _run(self, stmt: Any, params: Sequence[Any] | None = None) -> list[Any]:
        return await self._db.run(stmt, params)

    async def listed(self, kind: int, lo: int, hi: int) -> list[int]:
        rows = await self._run(self._stmts().d_list, (kind, lo, hi))
        return sorted(r[0] for r in rows)

    async def lookup(self, keys: Sequence[bytes], *, with_values: bool) -> dict[bytes, Any]:
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

    async def last_in_lane(self, q: int, lane: int, id_lo: int, id_hi: int) -> bytes | None:
        """The greatest live message key of one lane in ``[id_lo, id_hi]``: one reversed
        clustering read a page at a time, skipping bare row markers."""
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

    async def scan(self, start: bytes, end: bytes, limit: int, *, with_values: bool) -> list[Any]:
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
        parts = [first] if first == last else await self.listed(DIR_KV, first, last)

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
            queues = await self.listed(DIR_QUEUE, q_lo, min(q_hi, (1 << 32) - 1))
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


async def _nothing() -> list[Any]:
    return []
