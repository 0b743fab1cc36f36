"""The embedded store's writer thread: one thread that commits every pending write
in one LMDB transaction (group commit; the commit itself is
:class:`~dynaq.storage.embedded_commit_core.CommitCore`).

Many concurrent enqueues share one durable commit (one fsync), and each caller
is answered only after that commit returned.

A lone write (one request in its loop iteration, the last commit a lone one too,
nothing queued, the writer thread idle) is committed on the event loop itself
(:class:`~dynaq.storage.embedded_commit_core.LoopCommits`).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from dynaq.errors import StorageUnavailable
from dynaq.storage.embedded_commit_core import (
    CommitCore,
    LoopCommits,
    WriteRequest,
    resolve_all,
)

# How long the writer waits for more callers when the last commit answered
# more than are queued (see GroupCommitter._write_loop).
_GATHER_S = 0.00015

_STOP = object()


class GroupCommitter:
    """The single writer thread of one LMDB environment (see the module docstring)."""

    def __init__(self, core: CommitCore, on_commit: Callable[[float], None] | None = None) -> None:
        self._core = core
        self._on_commit = on_commit
        # Items are lists of requests (one per event-loop iteration) or _STOP.
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._pending: dict[asyncio.AbstractEventLoop, list[WriteRequest]] = {}
        self._last_group = 1
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._count_lock = threading.Lock()
        self._outstanding = 0
        """Requests handed to the writer thread and not yet answered by it: while
        any are, a lone write goes to the thread too (commits stay in order)."""
        self._on_loop = LoopCommits(core, on_commit)

    @property
    def commits(self) -> int:
        return self._core.commits

    @property
    def committed_ops(self) -> int:
        return self._core.committed_ops

    async def start(self) -> None:
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
            resolve_all(reqs)
            return
        if len(reqs) == 1 and self._last_group == 1 and self._commit_here(reqs):
            return
        with self._count_lock:
            self._outstanding += len(reqs)
        self._requests.put(reqs)

    def _commit_here(self, reqs: list[WriteRequest]) -> bool:
        """Commit a lone write on the loop, if the writer thread has nothing to do (only
        this thread hands it work, so it stays idle meanwhile)."""
        if not self._on_loop.allowed():
            return False
        with self._count_lock:
            if self._outstanding:
                return False
        self._on_loop.commit(reqs)
        return True

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
            batch, carry = self._core.take(waiting)
            self._last_group = len(batch)
            started = time.perf_counter()
            self._core.commit(batch)
            elapsed = time.perf_counter() - started
            # Answer before any bookkeeping: the callers wait on this thread, the
            # metrics do not (and the commit's latency is what users feel).
            self._answer(batch)
            with self._count_lock:
                self._outstanding -= len(batch)
            if self._on_commit is not None:
                self._on_commit(elapsed)

    def _drain(self, waiting: list[WriteRequest], *, block: bool) -> bool:
        """Move queued requests into ``waiting`` (waiting up to :data:`_GATHER_S`
        for the first when ``block``); True when the end was queued."""
        while len(waiting) < self._core.max_commit_ops:
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

    @staticmethod
    def _answer(batch: list[WriteRequest]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[WriteRequest]] = {}
        for req in batch:
            by_loop.setdefault(req.loop, []).append(req)
        for loop, reqs in by_loop.items():
            # RuntimeError: the loop closed while we committed.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(resolve_all, reqs)
