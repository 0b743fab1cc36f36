"""The embedded store: LMDB, with one writer thread doing group commit.

Why LMDB: a queue deletes every message it stores, and LSM stores (RocksDB,
LevelDB) slow their range scans 12x-440x over tombstones, while LMDB's B-tree
does not. LMDB allows one writer at a time, so all writes go through a single
thread that drains every pending request into one transaction and commits it
with one fsync (group commit): many concurrent enqueues share one durable
commit, and each caller is answered only after that commit returned. Reads run
on a small thread pool with a fresh read transaction each (cheap in LMDB), so
no LMDB call ever runs on the event loop.

**A full store.** LMDB copies on write: even a delete needs free pages for
the new copies of the pages it changes, so a store filled to the last page
cannot delete either, and consumers could not drain it. Two reserves keep
that from happening. A write that adds messages (a batch with a message
put) is refused with :class:`~dynaq.errors.InsufficientStorage` (HTTP 507)
when the pages in use plus its own size would pass ``fill_limit`` of the map
(the pages in use are read from the B-tree's stats in the write
transaction, so pages freed by deletes count as free again), or when the
disk under the store has less than ``min_free_disk`` bytes left (LMDB grows
its file as it needs pages, and a write the file system cannot take fails
the whole commit). Deletes and small records (id high-water marks, leases,
config) use the reserve; once consumers have drained the queue, message
writes succeed again. An LMDB ``MapFullError``, or a commit failing while the
disk is short, is also answered as ``InsufficientStorage``.

Every value is stored as an 8-byte big-endian version followed by the payload.
Versions come from a per-process hybrid clock (wall-clock microseconds, bumped
to stay strictly increasing), so a key's version changes on every write, even
across restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import struct
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import lmdb

from dynaq.errors import DynaqError, InsufficientStorage, StorageError, StorageUnavailable
from dynaq.storage.base import MESSAGE_PREFIX, Item, Op, Put, Store

_VERSION = struct.Struct(">Q")
_VLEN = _VERSION.size

# Kinds of write request the writer thread understands.
_BATCH = 0
_PUT = 1
_PUT_IF_ABSENT = 2
_PUT_IF_VERSION = 3
_DELETE = 4

# B-tree page counts in an LMDB stat: what a database occupies.
_PAGE_KINDS = ("branch_pages", "leaf_pages", "overflow_pages")
# Per-entry cost beyond key and value (node header, version) when estimating a write.
_ENTRY_OVERHEAD = 24
# Pages LMDB needs besides the data tree (two meta pages, the main DB, the free list).
_BASE_PAGES = 8


@dataclass(slots=True)
class _WriteRequest:
    kind: int
    payload: Any
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    result: Any = None
    error: BaseException | None = None
    size: int = field(default=1)


_STOP = object()


class LmdbStore(Store):
    """LMDB-backed :class:`~dynaq.storage.base.Store` with group commit.

    ``path`` is a directory; ``map_size`` is address space, not disk, so it
    can be large. ``max_commit_ops`` caps how many operations one commit takes.
    Writes that add messages are refused (:class:`InsufficientStorage`) past
    ``fill_limit`` (a fraction) of the map or when less than ``min_free_disk``
    bytes are left on the disk: the rest is the reserve deletes need.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        map_size: int = 64 * 1024**3,
        max_commit_ops: int = 50_000,
        read_threads: int = 4,
        fill_limit: float = 0.9,
        min_free_disk: int = 64 * 1024**2,
    ) -> None:
        if not 0 < fill_limit <= 1:
            raise ValueError("fill_limit must be in (0, 1]")
        self._path = os.fspath(path)
        self._map_size = map_size
        self._fill_bytes = int(map_size * fill_limit)
        self._min_free_disk = min_free_disk
        self._max_commit_ops = max_commit_ops
        self._read_threads = read_threads
        self._env: Any = None
        self._db: Any = None
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._last_version = 0
        self.commits = 0
        self.committed_ops = 0
        self.on_commit: Callable[[float], None] | None = None
        """Told each group commit's duration in seconds, fsync included (from the
        writer thread: it must be thread-safe and quick)."""

    # lifecycle -----------------------------------------------------------

    async def open(self) -> None:
        if self._env is not None:
            return
        await asyncio.to_thread(os.makedirs, self._path, exist_ok=True)
        try:
            self._env = await asyncio.to_thread(
                lmdb.open,
                self._path,
                map_size=self._map_size,
                max_dbs=4,
                sync=True,
                metasync=True,
                readahead=False,
                max_readers=256,
            )
            self._db = await asyncio.to_thread(self._env.open_db, b"kv")
        except lmdb.Error as exc:
            raise StorageUnavailable(f"cannot open LMDB store at {self._path}: {exc}") from exc
        self._readers = ThreadPoolExecutor(self._read_threads, thread_name_prefix="lmdb-read")
        self._writer = threading.Thread(target=self._write_loop, name="lmdb-writer", daemon=True)
        self._writer.start()

    async def close(self) -> None:
        if self._env is None:
            return
        self._requests.put(_STOP)
        writer = self._writer
        if writer is not None:
            await asyncio.to_thread(writer.join)
        if self._readers is not None:
            await asyncio.to_thread(self._readers.shutdown, True)
        env, self._env = self._env, None
        await asyncio.to_thread(env.close)

    # versions --------------------------------------------------------------

    def _next_version(self) -> int:
        # Only the writer thread calls this, so no lock is needed.
        v = max(self._last_version + 1, time.time_ns() // 1000)
        self._last_version = v
        return v

    # writer thread -------------------------------------------------------

    def _write_loop(self) -> None:
        stop = False
        while not stop:
            first = self._requests.get()
            if first is _STOP:
                break
            batch: list[_WriteRequest] = [first]
            ops = first.size
            while ops < self._max_commit_ops:
                try:
                    nxt = self._requests.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                batch.append(nxt)
                ops += nxt.size
            started = time.perf_counter()
            self._commit(batch)
            if self.on_commit is not None:
                self.on_commit(time.perf_counter() - started)
            self._answer(batch)

    def _commit(self, batch: list[_WriteRequest]) -> None:
        try:
            with self._env.begin(write=True, db=self._db) as txn:
                sizes = [_message_bytes(r) for r in batch]
                room = self._room(txn) if any(sizes) else None
                for req, grows in zip(batch, sizes, strict=True):
                    if grows and room is not None:
                        left, why = room
                        if grows > left:
                            req.error = InsufficientStorage(why)
                            continue
                        room = (left - grows, why)
                    req.result = self._apply(txn, req)
            self.commits += 1
            self.committed_ops += sum(r.size for r in batch if r.error is None)
            return
        except lmdb.Error as exc:
            if len(batch) == 1:
                batch[0].error = self._translate(exc)
                return
        # One request spoiled the shared transaction (e.g. the map is full):
        # retry each on its own so the others still commit.
        for req in batch:
            req.error = None
            self._commit([req])

    def _room(self, txn: Any) -> tuple[int, str]:
        """Bytes message writes may still add before the reserve, and what limits them.

        The map: pages in use (the B-tree's own stats, so pages freed by deletes
        are free again) against ``fill_limit``. The disk: what the file system
        has left plus the free pages inside the file (it never shrinks, LMDB
        reuses them), less ``min_free_disk``.
        """
        stat = txn.stat(self._db)
        psize = stat["psize"]
        used = (sum(stat[k] for k in _PAGE_KINDS) + _BASE_PAGES) * psize
        room = self._fill_bytes - used
        why = (
            f"the store is full ({self._fill_bytes * 100 // self._map_size}% of its "
            f"{self._map_size // 1024**2} MiB map): message writes are refused until "
            "consumers drain the queue"
        )
        disk = self._disk_free()
        if disk is not None:
            in_file = max(0, (self._env.info()["last_pgno"] + 1) * psize - used)
            disk_room = disk + in_file - self._min_free_disk
            if disk_room < room:
                room = disk_room
                why = (
                    f"the disk under the store is nearly full (a reserve of "
                    f"{self._min_free_disk // 1024**2} MiB is kept for deletes): message "
                    "writes are refused until consumers drain the queue"
                )
        return max(0, room), why

    def _disk_free(self) -> int | None:
        """Bytes the file system under the store has left for us (``None``: unknown)."""
        try:
            st = os.statvfs(self._path)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def _translate(self, exc: lmdb.Error) -> BaseException:
        """An LMDB write error as the caller sees it: a full map or disk is a 507."""
        if isinstance(exc, lmdb.MapFullError):
            return InsufficientStorage(f"the store's LMDB map is full: {exc}")
        disk = self._disk_free()
        if disk is not None and disk < max(self._min_free_disk, 1024**2):
            return InsufficientStorage(f"the disk under the store is full: {exc}")
        return exc

    def _apply(self, txn: Any, req: _WriteRequest) -> Any:
        kind, p = req.kind, req.payload
        if kind == _BATCH:
            version = _VERSION.pack(self._next_version())
            if all(type(op) is Put for op in p):
                # The common case (enqueue, publish): one C call for the whole run.
                txn.cursor().putmulti([(k, version + v) for k, v in p])
                return [True] * len(p)
            out: list[bool] = []
            for op in p:
                if type(op) is Put:
                    txn.put(op.key, version + op.value)
                    out.append(True)
                else:
                    out.append(txn.delete(op.key))
            return out
        if kind == _PUT:
            key, value = p
            v = self._next_version()
            txn.put(key, _VERSION.pack(v) + value)
            return v
        if kind == _PUT_IF_ABSENT:
            key, value = p
            v = self._next_version()
            return v if txn.put(key, _VERSION.pack(v) + value, overwrite=False) else None
        if kind == _PUT_IF_VERSION:
            key, value, expected = p
            current = txn.get(key)
            if current is None or _VERSION.unpack_from(current)[0] != expected:
                return None
            v = self._next_version()
            txn.put(key, _VERSION.pack(v) + value)
            return v
        if kind == _DELETE:
            return txn.delete(p)
        raise AssertionError(kind)

    @staticmethod
    def _answer(batch: list[_WriteRequest]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[_WriteRequest]] = {}
        for req in batch:
            by_loop.setdefault(req.loop, []).append(req)
        for loop, reqs in by_loop.items():
            # RuntimeError: the loop closed while we committed.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve_all, reqs)

    async def _submit(self, kind: int, payload: Any, size: int = 1) -> Any:
        if self._env is None:
            raise StorageUnavailable("store is closed")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._requests.put(_WriteRequest(kind, payload, fut, loop, size=size))
        return await fut

    # reads -----------------------------------------------------------------

    async def _read(self, fn: Callable[[Any], Any]) -> Any:
        env = self._env
        if env is None or self._readers is None:
            raise StorageUnavailable("store is closed")
        db = self._db

        def run() -> Any:
            with env.begin(db=db, buffers=False) as txn:
                return fn(txn)

        try:
            return await asyncio.get_running_loop().run_in_executor(self._readers, run)
        except lmdb.Error as exc:
            raise StorageError(f"LMDB read failed: {exc}") from exc

    # contract ------------------------------------------------------------

    async def get(self, key: bytes) -> Item | None:
        def fn(txn: Any) -> Item | None:
            raw = txn.get(key)
            return None if raw is None else Item(raw[_VLEN:], _VERSION.unpack_from(raw)[0])

        result: Item | None = await self._read(fn)
        return result

    async def get_many(self, keys: Sequence[bytes]) -> list[Item | None]:
        keys = list(keys)

        def fn(txn: Any) -> list[Item | None]:
            out: list[Item | None] = []
            for k in keys:
                raw = txn.get(k)
                out.append(None if raw is None else Item(raw[_VLEN:], _VERSION.unpack_from(raw)[0]))
            return out

        result: list[Item | None] = await self._read(fn)
        return result

    async def put(self, key: bytes, value: bytes) -> int:
        version: int = await self._submit(_PUT, (key, value))
        return version

    async def put_if_absent(self, key: bytes, value: bytes) -> int | None:
        version: int | None = await self._submit(_PUT_IF_ABSENT, (key, value))
        return version

    async def put_if_version(self, key: bytes, value: bytes, version: int) -> int | None:
        new: int | None = await self._submit(_PUT_IF_VERSION, (key, value, version))
        return new

    async def delete(self, key: bytes) -> bool:
        existed: bool = await self._submit(_DELETE, key)
        return existed

    async def write_batch(self, ops: Sequence[Op]) -> list[bool]:
        if not ops:
            return []
        result: list[bool] = await self._submit(_BATCH, list(ops), size=len(ops))
        return result

    async def scan(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        if limit <= 0 or start >= end:
            return []

        def fn(txn: Any) -> list[tuple[bytes, bytes]]:
            out: list[tuple[bytes, bytes]] = []
            cur = txn.cursor()
            if not cur.set_range(start):
                return out
            for k, v in cur:
                if k >= end:
                    break
                out.append((k, v[_VLEN:]))
                if len(out) >= limit:
                    break
            return out

        result: list[tuple[bytes, bytes]] = await self._read(fn)
        return result

    async def last_key(self, start: bytes, end: bytes) -> bytes | None:
        if start >= end:
            return None

        def fn(txn: Any) -> bytes | None:
            cur = txn.cursor()
            found = cur.prev() if cur.set_range(end) else cur.last()
            if not found:
                return None
            key = bytes(cur.key())
            return key if key >= start else None

        result: bytes | None = await self._read(fn)
        return result

    async def list_keys(
        self, prefix: bytes, limit: int, start_after: bytes | None = None
    ) -> list[bytes]:
        def fn(txn: Any) -> list[bytes]:
            out: list[bytes] = []
            cur = txn.cursor()
            begin = prefix
            if start_after is not None and start_after >= prefix:
                begin = start_after
            if not cur.set_range(begin):
                return out
            for k in cur.iternext(keys=True, values=False):
                if start_after is not None and k == start_after:
                    continue
                if not k.startswith(prefix) or len(out) >= limit:
                    break
                out.append(k)
            return out

        result: list[bytes] = await self._read(fn)
        return result


def _message_bytes(req: _WriteRequest) -> int:
    """About how many bytes ``req`` adds as messages (0 when it adds none)."""
    if req.kind == _BATCH:
        return sum(
            len(op.key) + len(op.value) + _ENTRY_OVERHEAD
            for op in req.payload
            if type(op) is Put and op.key[:1] == MESSAGE_PREFIX
        )
    if req.kind in (_PUT, _PUT_IF_ABSENT):
        key, value = req.payload
        if key[:1] == MESSAGE_PREFIX:
            return len(key) + len(value) + _ENTRY_OVERHEAD
    return 0


def _resolve_all(reqs: list[_WriteRequest]) -> None:
    for req in reqs:
        if req.future.done():
            continue
        if isinstance(req.error, DynaqError):
            req.future.set_exception(req.error)
        elif req.error is not None:
            err = StorageError(f"LMDB write failed: {req.error}")
            err.__cause__ = req.error
            req.future.set_exception(err)
        else:
            req.future.set_result(req.result)
