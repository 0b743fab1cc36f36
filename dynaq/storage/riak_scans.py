"""Range reads on Riak: 2i pages over ``id_int`` (messages) and ``$key`` (the rest).

Riak has no ordered key space, so a range scan is a secondary-index range
query per bucket, merged; the store's contract (ordered, live keys only,
``end`` exclusive) is kept here so :mod:`dynaq.storage.riak` stays the
write and lifecycle side.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from dynaq.storage import riak_layout as lay
from dynaq.storage.base import Item
from dynaq.storage.riak_http import RiakHttp

_PAGE = 1000
_FIRST_WINDOW = 1 << 23  # ids of ~1 s (an id holds wall ms from bit 13)


class RiakScans:
    """Ordered range reads over a message bucket ``m`` and a kv bucket ``kv``.

    ``get_many`` reads values back (and settles siblings) through the store.
    """

    def __init__(
        self,
        db: RiakHttp,
        m: str,
        kv: str,
        get_many: Callable[[Sequence[bytes]], Awaitable[list[Item | None]]],
    ) -> None:
        self._db = db
        self._m = m
        self._kv = kv
        self.get_many = get_many

    async def last_key(self, start: bytes, end: bytes) -> bytes | None:
        """The greatest key: message keys by probing ``id_int`` windows down from
        ``end`` (2i has no reverse order; ids grow with time, so the newest key is
        near the top and the first probe usually finds it), kv keys by paging."""
        lo, hi = lay.msg_pos(start), lay.msg_pos(end)
        found: list[bytes] = []
        if lo < hi:
            window, top = _FIRST_WINDOW, hi
            while top > lo and not found:
                bottom = max(lo, top - window)
                found = await self._all_keys(self._m, lay.INDEX, bottom, top - 1, lay.from_msg)
                top, window = bottom, window << 4
        kv = await self._all_keys(
            self._kv, lay.KEY_INDEX, lay.kv_name(start), lay.kv_name(end), lay.from_kv
        )
        kv = [k for k in kv if k < end]
        if kv:  # ``$key`` may list a tombstone: the greatest live one
            items = await self.get_many(kv)
            kv = [k for k, i in zip(kv, items, strict=True) if i is not None]
        candidates = found[-1:] + kv[-1:]
        return max(candidates) if candidates else None

    async def _all_keys(
        self, bucket: str, index: str, lo: str | int, hi: str | int, decode: Any
    ) -> list[bytes]:
        out: list[bytes] = []
        cont: str | None = None
        while True:
            names, cont = await self._db.index_page(bucket, index, lo, hi, _PAGE, cont)
            out.extend(decode(n) for n in names)
            if not cont or not names:
                return out

    async def scan(
        self, start: bytes, end: bytes, limit: int, *, with_values: bool
    ) -> list[tuple[bytes, bytes | None]]:
        if limit <= 0 or start >= end:
            return []
        lo, hi = lay.msg_pos(start), lay.msg_pos(end)
        msgs, kvs = await asyncio.gather(
            self._paged(self._m, lay.INDEX, lo, hi - 1, limit, with_values, lay.from_msg)
            if lo < hi
            else _nothing(),
            self._paged(
                self._kv,
                lay.KEY_INDEX,
                lay.kv_name(start),
                lay.kv_name(end),
                limit,
                with_values,
                lay.from_kv,
            ),
        )
        rows = [*msgs, *(r for r in kvs if r[0] < end)]
        if msgs and kvs:
            rows.sort(key=lambda r: r[0])
        return rows[:limit]

    async def _paged(
        self,
        bucket: str,
        index: str,
        lo: str | int,
        hi: str | int,
        limit: int,
        with_values: bool,
        decode: Any,
    ) -> list[tuple[bytes, bytes | None]]:
        """Up to ``limit`` live keys of a 2i range, in order, following continuations.

        Message keys leave ``id_int`` the moment they are deleted; ``$key`` may
        still list a kv key's tombstone, so kv keys are always read back.
        """
        out: list[tuple[bytes, bytes | None]] = []
        cont: str | None = None
        check = with_values or bucket == self._kv
        while len(out) < limit:
            want = limit - len(out) + (1 if bucket == self._kv else 0)  # room for ``end``
            names, cont = await self._db.index_page(bucket, index, lo, hi, want, cont)
            keys = [decode(n) for n in names]
            if check:
                items = await self.get_many(keys)
                out.extend((k, i.value) for k, i in zip(keys, items, strict=True) if i)
            else:
                out.extend((k, None) for k in keys)
            if not cont or not names:
                break
        return out[: limit + (1 if bucket == self._kv else 0)]


async def _nothing() -> list[tuple[bytes, bytes | None]]:
    return []


__all__ = ["RiakScans"]
