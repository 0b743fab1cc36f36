"""The embedded store's writer: one thread that commits every pending write in one
LMDB transaction (group commit), with the full-store reserve.

Many concurrent enqueues share one durable commit (one fsync), and each caller
is answered only after that commit returned. A write that adds messages is
refused with :class:`~dynaq.errors.InsufficientStorage` when it would eat into
the reserve that deletes need (see :mod:`dynaq.storage.embedded`).

Every value is stored as an 8-byte big-endian version followed by the payload.
Versions come from a per-process hybrid clock (wall-clock microseconds, bumped
to stay strictly increasing), so a key's version changes on every write, even
across restarts. Several processes sharing one environment (a node's workers)
each stamp versions with their own residue modulo ``version_tags``, so two of
them never write the same version of a key within one microsecond.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import lmdb

from dynaq.errors import DynaqError, InsufficientStorage, StorageError, StorageUnavailable
from dynaq.storage.base import MESSAGE_PREFIX, Put
from dynaq.storage.embedded_reserve import Reserve

VERSION = struct.Struct(">Q")
VERSION_LEN = VERSION.size

# Kinds of write request the writer thread understands.
BATCH = 0
PUT = 1
PUT_IF_ABSENT = 2
PUT_IF_VERSION = 3
DELETE = 4

# How long the writer waits for more callers when the last commit answered
# more than are queued (see GroupCommitter._write_loop).
_GATHER_S = 0.00015
# Per-entry cost beyond key and value (node header, version) when estimating a write.
_ENTRY_OVERHEAD = 24


@dataclass(slots=True)
class WriteRequest:
    kind: int
    payload: Any
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    result: Any = None
    error: BaseException | None = None
    size: int = field(default=1)


_STOP = object()


class GroupCommitter:
    """The single writer thread of one LMDB environment.

    ``fill_bytes`` of the ``map_size`` may hold data before message writes are
    refused; ``min_free_disk`` bytes of the disk are likewise kept for deletes.
    At most ``max_commit_ops`` operations go into one commit. New keys under
    ``growth_prefixes``, and every key under ``added_prefixes``, count against
    the limit like messages (see :func:`growth_bytes`).
    """

    def __init__(
        self,
        env: Any,
        db: Any,
        path: str,
        *,
        map_size: int,
        fill_bytes: int,
        min_free_disk: int,
        max_commit_ops: int,
        growth_prefixes: tuple[bytes, ...] = (),
        added_prefixes: tuple[bytes, ...] = (),
        on_commit: Callable[[float], None] | None = None,
        version_tag: int = 0,
        version_tags: int = 1,
    ) -> None:
        if not 0 <= version_tag < version_tags:
            raise ValueError("version_tag must be in [0, version_tags)")
        self._version_tag = version_tag
        self._version_tags = version_tags
        self._env = env
        self._on_commit = on_commit
        self._growth_prefixes = growth_prefixes
        self._added_prefixes = MESSAGE_PREFIX, *added_prefixes
        self._db = db
        self._reserve = Reserve(
            env, db, path, map_size=map_size, fill_bytes=fill_bytes, min_free_disk=min_free_disk
        )
        self._max_commit_ops = max_commit_ops
        # Items are lists of requests (one per event-loop iteration) or _STOP.
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._pending: dict[asyncio.AbstractEventLoop, list[WriteRequest]] = {}
        self._last_group = 1
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._last_version = 0
        self.commits = 0
        self.committed_ops = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._write_loop, name="lmdb-writer", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Commit what is queued, then end the thread."""
        self._stopped = True
        self._flush(asyncio.get_running_loop(), closing=False)
        self._requests.put(_STOP)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)

    async def submit(self, kind: int, payload: Any, size: int = 1) -> Any:
        """Queue one write and wait until its commit returned; its result or error.

        The writes submitted during one event-loop iteration reach the writer
        thread together, at the start of the next one: the concurrent single
        requests that one wake-up of the loop handled share one commit, and
        the writer thread is woken (and takes the GIL) once for all of them
        rather than once each, while the loop is still busy with the rest.
        """
        if self._stopped:
            raise StorageUnavailable("store is closed")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        pending = self._pending.get(loop)
        if pending is None:
            pending = self._pending[loop] = []
            loop.call_soon(self._flush, loop)
        pending.append(WriteRequest(kind, payload, fut, loop, size=size))
        return await fut

    def _flush(self, loop: asyncio.AbstractEventLoop, closing: bool = True) -> None:
        """Hand this loop's pending writes to the writer thread (on the loop's thread)."""
        reqs = self._pending.pop(loop, None)
        if not reqs:
            return
        if self._stopped and closing:
            # Flushed after stop() queued the end: the thread would never see them.
            for req in reqs:
                req.error = StorageUnavailable("store is closed")
            _resolve_all(reqs)
            return
        self._requests.put(reqs)

    def _next_version(self) -> int:
        # Only the writer thread calls this, so no lock is needed.
        v = max(self._last_version + 1, time.time_ns() // 1000)
        tags = self._version_tags
        if tags > 1:
            # The next value at or above v that carries this process's tag.
            v += (self._version_tag - v) % tags
        self._last_version = v
        return v

    def _write_loop(self) -> None:
        carry: list[WriteRequest] = []
        stop = False
        while carry or not stop:
            if carry:
                waiting, carry = carry, []
            else:
                item = self._requests.get()
                if item is _STOP:
                    break
                waiting = list(item)
            # Take everything else already queued, then commit at most
            # max_commit_ops of it (always one request) and carry the rest.
            if not stop:
                stop = self._drain(waiting, block=False)
            if not stop and len(waiting) < self._last_group:
                # The last commit answered more callers than are here: most are
                # on their way back (their next request is being read). Wait a
                # little for them, so they share this commit instead of each
                # waiting out the next one. A lone caller (last group of one)
                # never waits.
                stop = self._drain(waiting, block=True)
            batch, carry = _take(waiting, self._max_commit_ops)
            self._last_group = len(batch)
            started = time.perf_counter()
            self._commit(batch)
            elapsed = time.perf_counter() - started
            # Answer before any bookkeeping: the callers wait on this thread, the
            # metrics do not (and the commit's latency is what users feel).
            self._answer(batch)
            if self._on_commit is not None:
                self._on_commit(elapsed)

    def _drain(self, waiting: list[WriteRequest], *, block: bool) -> bool:
        """Move queued requests into ``waiting`` (waiting up to :data:`_GATHER_S`
        for the first when ``block``); True when the end was queued."""
        while len(waiting) < self._max_commit_ops:
            try:
                item = (
                    self._requests.get(timeout=_GATHER_S) if block else self._requests.get_nowait()
                )
            except queue.Empty:
                return False
            if item is _STOP:
                return True
            waiting.extend(item)
            block = False
        return False

    def _commit(self, batch: list[WriteRequest]) -> None:
        try:
            with self._env.begin(write=True, db=self._db) as txn:
                sizes = [
                    growth_bytes(txn, r, self._growth_prefixes, self._added_prefixes) for r in batch
                ]
                room = self._reserve.room(txn) if any(sizes) else None
                # Puts of consecutive put-only requests go to LMDB in one call on
                # one cursor (in request order): py-lmdb gives the GIL away around
                # every cursor open, close and put, and each time the busy event
                # loop may take it, so per-request cursors multiply the handoffs.
                run: list[tuple[bytes, bytes]] = []
                for req, grows in zip(batch, sizes, strict=True):
                    if grows and room is not None:
                        left, why = room
                        if grows > left:
                            req.error = InsufficientStorage(why)
                            continue
                        room = (left - grows, why)
                    if self._add_puts(req, run):
                        continue
                    if run:
                        txn.cursor().putmulti(run)
                        run = []
                    req.result = self._apply(txn, req)
                if run:
                    txn.cursor().putmulti(run)
            self.commits += 1
            self.committed_ops += sum(r.size for r in batch if r.error is None)
            return
        except lmdb.Error as exc:
            if len(batch) == 1:
                batch[0].error = self._reserve.translate(exc)
                return
        # One request spoiled the shared transaction (e.g. the map is full):
        # retry each on its own so the others still commit.
        for req in batch:
            req.error = None
            self._commit([req])

    def _add_puts(self, req: WriteRequest, run: list[tuple[bytes, bytes]]) -> bool:
        """Append ``req``'s writes to ``run`` and set its result, if it only puts
        (enqueue, publish, a plain put): the common case. False: apply it alone."""
        kind, p = req.kind, req.payload
        if kind == BATCH and all(type(op) is Put for op in p):
            version = VERSION.pack(self._next_version())
            run.extend([(k, version + v) for k, v in p])
            req.result = [True] * len(p)
            return True
        if kind == PUT:
            key, value = p
            v = self._next_version()
            run.append((key, VERSION.pack(v) + value))
            req.result = v
            return True
        return False

    def _apply(self, txn: Any, req: WriteRequest) -> Any:
        """Apply a request :meth:`_add_puts` did not take."""
        kind, p = req.kind, req.payload
        if kind == BATCH:
            version = VERSION.pack(self._next_version())
            out: list[bool] = []
            for op in p:
                if type(op) is Put:
                    txn.put(op.key, version + op.value)
                    out.append(True)
                else:
                    out.append(txn.delete(op.key))
            return out
        if kind == PUT_IF_ABSENT:
            key, value = p
            v = self._next_version()
            return v if txn.put(key, VERSION.pack(v) + value, overwrite=False) else None
        if kind == PUT_IF_VERSION:
            key, value, expected = p
            current = txn.get(key)
            if current is None or VERSION.unpack_from(current)[0] != expected:
                return None
            v = self._next_version()
            txn.put(key, VERSION.pack(v) + value)
            return v
        if kind == DELETE:
            return txn.delete(p)
        raise AssertionError(kind)

    @staticmethod
    def _answer(batch: list[WriteRequest]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[WriteRequest]] = {}
        for req in batch:
            by_loop.setdefault(req.loop, []).append(req)
        for loop, reqs in by_loop.items():
            # RuntimeError: the loop closed while we committed.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve_all, reqs)


def growth_bytes(
    txn: Any,
    req: WriteRequest,
    growth_prefixes: tuple[bytes, ...],
    added_prefixes: tuple[bytes, ...] = (MESSAGE_PREFIX,),
) -> int:
    """About how many bytes ``req`` adds that must stay out of the reserve (0: none).

    A put under ``added_prefixes`` (messages, and the records written once with
    them: dedup records) always counts, unread: reading each key would cost the
    writer a GIL round trip per put. A put under ``growth_prefixes`` (batch
    headers and item blocks) counts when it creates its key: opening batches and
    adding items is refused on a full store, while overwriting an existing
    record (a batch ack) uses the reserve like a delete, so a consumer can still
    delete a batch-tagged message.
    """
    if req.kind == BATCH:
        puts = [(op.key, op.value) for op in req.payload if type(op) is Put]
    elif req.kind in (PUT, PUT_IF_ABSENT):
        puts = [req.payload]
    else:
        return 0
    total = 0
    for key, value in puts:
        if key.startswith(added_prefixes) or (
            key.startswith(growth_prefixes) and txn.get(key) is None
        ):
            total += len(key) + len(value) + _ENTRY_OVERHEAD
    return total


def _take(
    waiting: list[WriteRequest], max_ops: int
) -> tuple[list[WriteRequest], list[WriteRequest]]:
    """The first requests of ``waiting`` that hold at most ``max_ops`` operations
    (at least one request), and the rest."""
    ops = 0
    for i, req in enumerate(waiting):
        ops += req.size
        if ops >= max_ops:
            return waiting[: i + 1], waiting[i + 1 :]
    return waiting, []


def _resolve_all(reqs: list[WriteRequest]) -> None:
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
