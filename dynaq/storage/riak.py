"""The Riak store: the storage contract on Riak KV 2.x / 3.x over its HTTP API.

The design (buckets, the ``id_int`` index, conditional writes with vector
clocks and siblings, batches through a journal, tombstones) is in
``docs/storage-riak.md``; the wire layer is :mod:`dynaq.storage.riak_http`,
the key layout and sibling rule :mod:`dynaq.storage.riak_layout`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections.abc import Sequence
from typing import Any

from dynaq.clock import SystemClock
from dynaq.errors import InvalidInput, StorageUnavailable
from dynaq.storage import riak_layout as lay
from dynaq.storage.base import Delete, Item, Op, Put, Store
from dynaq.storage.riak_http import RiakHttp, Superseded, gather_limited
from dynaq.storage.riak_journal import Journal
from dynaq.storage.riak_locks import KeyLocks
from dynaq.storage.riak_races import RiakRaces
from dynaq.storage.riak_scans import RiakScans
from dynaq.tasks import cancel_and_wait, every

log = logging.getLogger(__name__)

_WRITE_TRIES = 32


class RiakStore(Store):
    """:class:`~dynaq.storage.base.Store` on a Riak KV cluster (see the module docs).

    ``http`` are ``"host:port"`` HTTP listeners. Buckets are named
    ``<bucket_prefix>_m`` (messages), ``_kv`` (everything else) and ``_jr``
    (the batch journal) in ``bucket_type``; :meth:`migrate_schema` gives them
    their properties (``dynaq migrate`` calls it).
    """

    def __init__(
        self,
        http: Sequence[str] = ("127.0.0.1:8098",),
        *,
        bucket_prefix: str = "dynaq",
        bucket_type: str = "default",
        n_val: int = 3,
        pool_size: int = 64,
        request_timeout_s: float = 15.0,
        journal_replay_after_s: float = 60.0,
        journal_replay_every_s: float = 60.0,
    ) -> None:
        if not bucket_prefix.replace("_", "").replace("-", "").isalnum():
            raise InvalidInput(f"invalid Riak bucket prefix {bucket_prefix!r}")
        self._db = RiakHttp(
            http, bucket_type=bucket_type, pool_size=pool_size, timeout_s=request_timeout_s
        )
        self._m = f"{bucket_prefix}_m"
        self._kv = f"{bucket_prefix}_kv"
        self._n_val = n_val
        self._fanout = pool_size
        self._versions = lay.Versions(random.getrandbits(10) ^ os.getpid())
        self._journal = Journal(self._db, f"{bucket_prefix}_jr", journal_replay_after_s)
        self._replay_every_s = journal_replay_every_s
        self._replayer: asyncio.Task[None] | None = None
        self._locks = KeyLocks()
        self._scans = RiakScans(self._db, self._m, self._kv, self.get_many)
        self._races = RiakRaces(self._db, self._m)

    # lifecycle and schema -------------------------------------------------

    async def open(self) -> None:
        """Connect, check the bucket type exists, finish batches crashed writers left.

        Then, every ``journal_replay_every_s`` (0: never), finish again the batches
        of writers that died since (any node's: the journal is shared), so a batch
        a crash cut short ends up whole without waiting for a node to start.
        """
        await self._db.open()
        try:
            await self._check_and_replay()
        except BaseException:
            await self._db.close()
            raise
        if self._replay_every_s > 0 and self._replayer is None:
            self._replayer = asyncio.create_task(
                every(
                    self._replay_every_s,
                    lambda: self._journal.replay(self._apply),
                    clock=SystemClock(),
                    what="Riak journal replay",
                ),
                name="riak-journal-replay",
            )

    async def _check_and_replay(self) -> None:
        if await self._db.props(self._journal.bucket) is None:
            raise self._no_bucket_type()
        await self._journal.replay(self._apply)

    def _no_bucket_type(self) -> InvalidInput:
        t = self._db.bucket_type
        return InvalidInput(
            f"Riak has no bucket type {t!r}; create it on a Riak node: "
            f"riak admin bucket-type create {t} '{{\"props\":{{}}}}' && "
            f"riak admin bucket-type activate {t}"
        )

    async def close(self) -> None:
        await cancel_and_wait(self._replayer)
        self._replayer = None
        await self._db.close()

    def bucket_props(self) -> dict[str, dict[str, Any]]:
        """The properties each bucket needs: siblings kept (``allow_mult``, dotted
        version vectors) where conditional writes happen, plain last-write-wins
        nowhere (messages are written once, so they need no siblings)."""
        base = {"n_val": self._n_val, "last_write_wins": False, "r": "quorum", "w": "quorum"}
        return {
            self._kv: {**base, "allow_mult": True, "dvv_enabled": True},
            self._m: {**base, "allow_mult": False},
            self._journal.bucket: {**base, "allow_mult": False},
        }

    async def migrate_schema(self) -> bool:
        changed = False
        for bucket, want in self.bucket_props().items():
            have = await self._db.props(bucket)
            if have is None:
                raise self._no_bucket_type()
            if any(have.get(k) != v for k, v in want.items()):
                await self._db.set_props(bucket, want)
                changed = True
        return changed

    # reads -------------------------------------------------------------------

    async def get(self, key: bytes) -> Item | None:
        if lay.is_message(key):
            obj = await self._db.fetch(self._m, lay.msg_name(key))
            live = lay.siblings(obj.contents)
            return Item(live[0].value, live[0].version) if live else None
        name = lay.kv_name(key)
        obj = await self._races.fetch_decided(self._kv, name)
        live = lay.siblings(obj.contents)
        cur = lay.current(live)
        if cur is None:
            return None
        if not lay.decided(live):
            # The race's losers never wrote the winner back (they died or timed
            # out in between): pick by the rule, and write the pick back so
            # every reader keeps it, as Dynamiq re-put siblings.
            log.warning("Riak key %s: a race nobody settled, resolved by the sibling rule", name)
            async with self._locks.hold(key):
                await self._races.settle(self._kv, name, obj, cur)
        return Item(cur.value, cur.version)

    async def get_many(self, keys: Sequence[bytes]) -> list[Item | None]:
        return await gather_limited([self.get(k) for k in keys], self._fanout)

    async def scan(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        rows = await self._scan(start, end, limit, with_values=True)
        return [(k, v or b"") for k, v in rows]

    async def list_keys(
        self, prefix: bytes, limit: int, start_after: bytes | None = None
    ) -> list[bytes]:
        from dynaq.storage.base import prefix_end

        start = prefix
        if start_after is not None and start_after >= prefix:
            start = start_after + b"\x00"
        end = prefix_end(prefix) if prefix else b"\xff" * 65
        return [k for k, _ in await self._scan(start, end, limit, with_values=False)]

    async def last_key(self, start: bytes, end: bytes) -> bytes | None:
        return await self._scans.last_key(start, end)

    async def _scan(
        self, start: bytes, end: bytes, limit: int, *, with_values: bool
    ) -> list[tuple[bytes, bytes | None]]:
        return await self._scans.scan(start, end, limit, with_values=with_values)

    # writes ------------------------------------------------------------------

    async def put(self, key: bytes, value: bytes) -> int:
        if lay.is_message(key):
            v = self._versions.next()
            await self._put_message(key, value, v)
            return v
        v2 = await self._write(key, value, expect=None, absent=False)
        assert v2 is not None  # an unconditional write always lands
        return v2

    async def put_if_absent(self, key: bytes, value: bytes) -> int | None:
        return await self._write(key, value, expect=None, absent=True)

    async def put_if_version(self, key: bytes, value: bytes, version: int) -> int | None:
        return await self._write(key, value, expect=version, absent=False)

    async def delete(self, key: bytes) -> bool:
        return (await self.write_batch([Delete(key)]))[0]

    async def _put_message(self, key: bytes, value: bytes, version: int) -> None:
        await self._db.store(
            self._m,
            lay.msg_name(key),
            value,
            meta={lay.V: str(version), lay.P: "0"},
            indexes={lay.INDEX: lay.position(key)},
        )

    async def _write(
        self, key: bytes, value: bytes, *, expect: int | None, absent: bool
    ) -> int | None:
        """A write that reads the current sibling first and sends its vclock back.

        Every write, conditional or not, is sent as "only if unchanged since
        that read": a write changed under it reads again and decides again. So
        a write whose request timed out here, but reached Riak late (a paused
        or overloaded node, a slow network), is refused if anything was written
        since it was read, instead of landing beside the newer value as a
        sibling that :func:`riak_layout.current` could prefer (it would be the
        older version) and so undo a write another caller was told succeeded.
        Riak's check is not atomic: writes checked at the same instant both
        land; the write then comes back with siblings, and
        :func:`riak_layout.won` says who won (``absent``, or ``expect`` a
        version); a loser writes the winner back. The read waits for a race
        still undecided to be (:meth:`RiakRaces.fetch_decided`). Writes of one key are
        serialised within this process, so only other processes race.
        """
        bucket = self._m if lay.is_message(key) else self._kv
        name = lay.msg_name(key) if bucket == self._m else lay.kv_name(key)
        conditional = absent or expect is not None
        async with self._locks.hold(key):
            for attempt in range(_WRITE_TRIES):
                obj = await self._races.fetch_decided(bucket, name)
                cur = lay.current(lay.siblings(obj.contents))
                if absent and cur is not None:
                    return None
                if expect is not None and (cur is None or cur.version != expect):
                    return None
                parent = cur.version if cur else 0
                v = self._versions.next(above=parent)
                try:
                    res = await self._db.store(
                        bucket,
                        name,
                        value,
                        vclock=obj.vclock,
                        meta={lay.V: str(v), lay.P: str(parent)},
                        indexes={lay.INDEX: lay.position(key)} if bucket == self._m else None,
                        returnbody=True,
                        unchanged_since=obj,
                    )
                except Superseded:
                    # Written since the fetch: decide again on what is there now,
                    # after a moment in which the writer that got in can finish.
                    await asyncio.sleep(random.uniform(0, 0.002 * (attempt + 1)))
                    continue
                assert res is not None
                live = lay.siblings(res.contents)
                if len(live) <= 1:
                    return v
                mine = next(s for s in live if s.version == v)
                if not conditional or lay.won(v, live):
                    await self._races.settle(bucket, name, res, mine)
                    return v
                await self._races.write_back_winner(bucket, name, res, v)
                return None
            raise StorageUnavailable(f"write of {key!r} kept racing other writers")

    async def write_batch(self, ops: Sequence[Op]) -> list[bool]:
        """Every op, concurrently; through the journal when there are several keys."""
        if not ops:
            if self._db.closed:
                raise StorageUnavailable("the Riak store is closed")
            return []
        last: dict[bytes, Op] = {}
        for op in ops:
            last.pop(op.key, None)
            last[op.key] = op
        first: dict[bytes, Op] = {}
        for op in ops:
            first.setdefault(op.key, op)
        # A key deleted, then put again in this batch: whether it existed before.
        again = [
            k for k, op in last.items() if isinstance(op, Put) and isinstance(first[k], Delete)
        ]
        before = dict(zip(again, await self.get_many(again), strict=True)) if again else {}
        if len(last) == 1:
            existed = await self._apply(list(last.values()))
        else:
            async with self._journal.entry(list(last.values())):
                existed = await self._apply(list(last.values()))
        # Results in op order: a delete reports whether the key existed just before it.
        state = dict(existed)
        state.update((k, item is not None) for k, item in before.items())
        results: list[bool] = []
        for op in ops:
            if isinstance(op, Put):
                results.append(True)
                state[op.key] = True
            else:
                results.append(state.get(op.key, False))
                state[op.key] = False
        return results

    async def _apply(self, ops: Sequence[Op]) -> dict[bytes, bool]:
        """Apply ops on distinct keys; map each deleted key to whether it existed."""

        async def one(op: Op) -> tuple[bytes, bool]:
            if isinstance(op, Put):
                if lay.is_message(op.key):
                    await self._put_message(op.key, op.value, self._versions.next())
                else:
                    await self._write(op.key, op.value, expect=None, absent=False)
                return op.key, True
            return op.key, await self._remove(op.key)

        return dict(await gather_limited([one(op) for op in ops], self._fanout))

    async def _remove(self, key: bytes) -> bool:
        if lay.is_message(key):
            return await self._db.remove(self._m, lay.msg_name(key))
        async with self._locks.hold(key):
            obj = await self._db.fetch(self._kv, lay.kv_name(key))
            if not lay.siblings(obj.contents):
                return False
            # With the vclock read: a write that lands meanwhile survives as a sibling.
            await self._db.remove(self._kv, lay.kv_name(key), obj.vclock)
            return True

    async def delete_range(self, start: bytes, end: bytes, chunk: int = 10_000) -> int:
        """Delete ``[start, end)`` a chunk of keys at a time (concurrent deletes; not atomic)."""
        removed = 0
        while True:
            rows = await self._scan(start, end, chunk, with_values=False)
            if not rows:
                return removed
            await self._apply([Delete(k) for k, _ in rows])
            removed += len(rows)
            start = rows[-1][0] + b"\x00"


__all__ = ["RiakStore"]
