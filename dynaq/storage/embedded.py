"""The embedded store: LMDB, with one writer thread doing group commit.

Why LMDB: a queue deletes every message it stores, and LSM stores (RocksDB,
LevelDB) slow their range scans 12x-440x over tombstones, while LMDB's B-tree
does not. LMDB allows one writer at a time, so all writes go through a single
thread (:mod:`dynaq.storage.embedded_commits`) that drains every pending
request into one transaction and commits it with one fsync (group commit):
many concurrent enqueues share one durable commit, and each caller is answered
only after that commit returned. Reads take a fresh read transaction each
(cheap in LMDB). By default (``read_threads = 0``) they run on the event loop
itself: a read of a memory-mapped B-tree whose pages are in memory takes
microseconds, while handing it to a thread and back costs tens (two wake-ups
and the GIL changing hands twice), which made a receive + delete cycle pay
more for the handoffs than for the reads. A store far larger than memory,
whose reads may wait on the disk, can give them ``read_threads`` threads
instead, so a page fault never stalls the loop.

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
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import lmdb

from dynaq.errors import StorageError, StorageUnavailable
from dynaq.storage.base import Item, Op, Store
from dynaq.storage.embedded_commit_core import (
    BATCH,
    DELETE,
    PUT,
    PUT_IF_ABSENT,
    PUT_IF_VERSION,
    VERSION,
    VERSION_LEN,
    CommitCore,
    LoopCommits,
    open_databases,
    open_environment,
    settings_to_wire,
    split_tags,
)
from dynaq.storage.embedded_commits import GroupCommitter
from dynaq.storage.embedded_counts import read_counts
from dynaq.storage.embedded_writer import ProcessCommitter

WRITERS = ("thread", "process")
"""Where the commits run: a thread of the node's process, or a process of their own
(see :mod:`dynaq.storage.embedded_writer`)."""

# Inline reads yield to the event loop once per this many (see LmdbStore._read).
_YIELD_EVERY = 8


class LmdbStore(Store):
    """LMDB-backed :class:`~dynaq.storage.base.Store` with group commit.

    Every write, a batch included, is one transaction under LMDB's single
    writer lock, in submission order: records settle in batches.

    ``path`` is a directory; ``map_size`` is address space, not disk, so it
    can be large. ``max_commit_ops`` caps how many operations one commit takes.
    Writes that add messages, new keys under ``growth_prefixes``, or any key
    under ``added_prefixes`` (records written once, with the messages they come
    with: no read tells a new key from an old one) are refused
    (:class:`InsufficientStorage`) past ``fill_limit`` (a fraction) of the map
    or when less than ``min_free_disk`` bytes are left on the disk: the rest is
    the reserve deletes need.

    Several processes may open one ``path`` (a node's workers: LMDB's lock file
    serializes their writers, robust mutexes recover from one killed mid-commit);
    they must use the same ``map_size``, and each its own ``version_tag`` out of
    ``version_tags`` (see :mod:`dynaq.storage.embedded_commits`). With
    ``writer_address`` the store commits through the writer process listening
    there, shared by the node's workers, instead of a writer of its own.
    ``count_messages``: keep each queue's message count in every write's
    transaction (:mod:`dynaq.storage.embedded_counts`; a node of several workers).
    """

    records_settle_in_batches = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        map_size: int = 64 * 1024**3,
        max_commit_ops: int = 50_000,
        read_threads: int = 0,
        fill_limit: float = 0.9,
        min_free_disk: int = 64 * 1024**2,
        growth_prefixes: tuple[bytes, ...] = (),
        added_prefixes: tuple[bytes, ...] = (),
        version_tag: int = 0,
        version_tags: int = 1,
        writer: str = "thread",
        writer_address: str | None = None,
        count_messages: bool = True,
    ) -> None:
        if not 0 < fill_limit <= 1:
            raise ValueError("fill_limit must be in (0, 1]")
        if writer not in WRITERS:
            raise ValueError(f"writer must be one of {WRITERS}")
        self._writer_kind = "process" if writer_address else writer
        self._writer_address = writer_address
        self._path = os.fspath(path)
        self._map_size = map_size
        self._fill_bytes = int(map_size * fill_limit)
        self._min_free_disk = min_free_disk
        self._max_commit_ops = max_commit_ops
        self._read_threads = read_threads
        self._growth_prefixes = growth_prefixes
        self._added_prefixes = added_prefixes
        self._version_tag = version_tag
        self._version_tags = version_tags
        self._env: Any = None
        self._db: Any = None
        self._counts: Any = None
        self._count_messages = count_messages
        self._writer: GroupCommitter | ProcessCommitter | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._inline_reads = 0
        self.on_commit: Callable[[float], None] | None = None
        """Told each group commit's duration in seconds, fsync included (from the
        writer thread: it must be thread-safe and quick)."""

    # lifecycle -----------------------------------------------------------

    async def open(self) -> None:
        if self._env is not None:
            return
        try:
            await asyncio.to_thread(os.makedirs, self._path, exist_ok=True)
        except OSError as exc:  # a file in the way, no permission, a read-only disk
            raise StorageUnavailable(
                f"cannot create the store's directory {self._path}: {exc}"
            ) from None
        try:
            self._env = await asyncio.to_thread(open_environment, self._path, self._map_size)
            # Reader slots left by a process killed mid-read (another worker of the
            # node, or this one before a crash) would pin old pages forever.
            await asyncio.to_thread(self._env.reader_check)
            # A store written before message counts existed is counted here, once.
            self._db, self._counts = await asyncio.to_thread(
                open_databases, self._env, self._count_messages
            )
        except lmdb.Error as exc:
            raise StorageUnavailable(f"cannot open LMDB store at {self._path}: {exc}") from exc
        if self._read_threads > 0:
            self._readers = ThreadPoolExecutor(self._read_threads, thread_name_prefix="lmdb-read")
        on_commit = self._commit_done
        settings = self._commit_settings()
        writer: GroupCommitter | ProcessCommitter
        if self._writer_kind == "process" and self._writer_address is not None:
            writer = ProcessCommitter(
                {"path": self._path, **self._wire(settings)},
                on_commit,
                address=self._writer_address,
            )
        elif self._writer_kind == "process":
            # Two committers on one environment: this process's lone writes and the
            # writer process's groups. Each stamps versions with a residue of its own.
            child, here = split_tags(settings, 0), split_tags(settings, 1)
            writer = ProcessCommitter(
                {"path": self._path, **self._wire(child)},
                on_commit,
                on_loop=LoopCommits(self._core(here), on_commit),
            )
        else:
            writer = GroupCommitter(self._core(settings), on_commit)
        try:
            await writer.start()
        except StorageUnavailable:
            env, self._env = self._env, None
            await asyncio.to_thread(env.close)
            raise
        self._writer = writer

    def _core(self, settings: dict[str, Any]) -> CommitCore:
        return CommitCore(self._env, self._db, self._path, counts=self._counts, **settings)

    def _commit_settings(self) -> dict[str, Any]:
        return {
            "map_size": self._map_size,
            "fill_bytes": self._fill_bytes,
            "min_free_disk": self._min_free_disk,
            "max_commit_ops": self._max_commit_ops,
            "growth_prefixes": self._growth_prefixes,
            "added_prefixes": self._added_prefixes,
            "version_tag": self._version_tag,
            "version_tags": self._version_tags,
        }

    def shared_writer_options(self) -> dict[str, Any]:
        """What the writer process shared by a node's workers runs with
        (:class:`~dynaq.storage.embedded_writer_host.SharedWriter`): this store's
        path and commit settings. It alone stamps versions, so it takes no tag."""
        settings = {**self._commit_settings(), "version_tag": 0, "version_tags": 1}
        return {"path": self._path, **self._wire(settings)}

    def _wire(self, settings: dict[str, Any]) -> dict[str, Any]:
        return {**settings_to_wire(settings), "count_messages": self._count_messages}

    def _commit_done(self, seconds: float) -> None:
        if self.on_commit is not None:
            self.on_commit(seconds)

    async def close(self) -> None:
        if self._env is None:
            return
        if self._writer is not None:
            await self._writer.stop()
        if self._readers is not None:
            await asyncio.to_thread(self._readers.shutdown, True)
        env, self._env = self._env, None
        await asyncio.to_thread(env.close)

    @property
    def commits(self) -> int:
        """Commits so far (each one fsync)."""
        return 0 if self._writer is None else self._writer.commits

    async def _submit(self, kind: int, payload: Any, size: int = 1) -> Any:
        if self._writer is None or self._env is None:
            raise StorageUnavailable("store is closed")
        return await self._writer.submit(kind, payload, size)

    # reads -----------------------------------------------------------------

    async def _read(self, fn: Callable[[Any], Any]) -> Any:
        env = self._env
        if env is None:
            raise StorageUnavailable("store is closed")
        db = self._db

        def run() -> Any:
            with env.begin(db=db, buffers=False) as txn:
                return fn(txn)

        try:
            if self._readers is not None:
                return await asyncio.get_running_loop().run_in_executor(self._readers, run)
            self._inline_reads += 1
            if self._inline_reads % _YIELD_EVERY == 0:
                # An inline read does not suspend its caller: a task that only
                # reads (a scan over many empty partitions) yields here now and
                # then, so it cannot hold the loop for long.
                await asyncio.sleep(0)
                if self._env is None:
                    raise StorageUnavailable("store is closed")
            return run()
        except lmdb.Error as exc:
            raise StorageError(f"LMDB read failed: {exc}") from exc

    # contract ------------------------------------------------------------

    async def get(self, key: bytes) -> Item | None:
        def fn(txn: Any) -> Item | None:
            raw = txn.get(key)
            return None if raw is None else Item(raw[VERSION_LEN:], VERSION.unpack_from(raw)[0])

        result: Item | None = await self._read(fn)
        return result

    async def get_many(self, keys: Sequence[bytes]) -> list[Item | None]:
        keys = list(keys)

        def fn(txn: Any) -> list[Item | None]:
            out: list[Item | None] = []
            for k in keys:
                raw = txn.get(k)
                out.append(
                    None if raw is None else Item(raw[VERSION_LEN:], VERSION.unpack_from(raw)[0])
                )
            return out

        result: list[Item | None] = await self._read(fn)
        return result

    async def put(self, key: bytes, value: bytes) -> int:
        version: int = await self._submit(PUT, (key, value))
        return version

    async def put_if_absent(self, key: bytes, value: bytes) -> int | None:
        version: int | None = await self._submit(PUT_IF_ABSENT, (key, value))
        return version

    async def put_if_version(self, key: bytes, value: bytes, version: int) -> int | None:
        new: int | None = await self._submit(PUT_IF_VERSION, (key, value, version))
        return new

    async def delete(self, key: bytes) -> bool:
        existed: bool = await self._submit(DELETE, key)
        return existed

    async def write_batch(self, ops: Sequence[Op]) -> list[bool]:
        if not ops:
            return []
        result: list[bool] = await self._submit(BATCH, list(ops), size=len(ops))
        return result

    async def message_counts(self, queue_numbers: Sequence[int]) -> list[int] | None:
        numbers, counts = list(queue_numbers), self._counts
        if counts is None:
            return None  # count_messages=False

        def fn(txn: Any) -> list[int]:
            return read_counts(txn, counts, numbers)

        result: list[int] = await self._read(fn)
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
                out.append((k, v[VERSION_LEN:]))
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

    async def last_keys(self, ranges: Sequence[tuple[bytes, bytes]]) -> list[bytes | None]:
        ranges = list(ranges)

        def fn(txn: Any) -> list[bytes | None]:
            cur = txn.cursor()
            out: list[bytes | None] = []
            for start, end in ranges:
                key: bytes | None = None
                if start < end and (cur.prev() if cur.set_range(end) else cur.last()):
                    key = bytes(cur.key())
                out.append(key if key is not None and key >= start else None)
            return out

        result: list[bytes | None] = await self._read(fn)
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
