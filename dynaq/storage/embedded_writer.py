"""The embedded store's writer process (``embedded.writer = "process"``): the node's
side of it.

The writer thread (:mod:`dynaq.storage.embedded_commits`) shares the node's GIL:
py-lmdb gives the GIL away around every put and must take it back after, so
behind a busy event loop each put of a group commit waits for the loop to let
go. A writer process commits with a GIL of its own
(:mod:`dynaq.storage.embedded_writer_child`), and the event loop only packs each
loop iteration's writes into one frame on a socket and reads the answers.

Guarantees (the same as the writer thread's): a write is answered only after the
commit that holds it returned (fsync'd); writes submitted in one loop iteration
share a commit; the node's reads see a write as soon as it is answered (one
LMDB environment, opened by both processes). If the writer process dies, every
write it had not answered fails with :class:`~dynaq.errors.StorageUnavailable`
(its outcome unknown, as a timeout's: it may have committed), new writes fail
the same way until a new writer process is up, which is started at once (LMDB's
lock recovers from a writer killed mid-commit). The writer process never
outlives the node.

A lone write (alone in its loop iteration, after a lone one, the writer process
idle) is committed by the node itself, on its loop, as with the writer thread
(:class:`~dynaq.storage.embedded_commit_core.LoopCommits`): a frame to the
writer process and its answer would cost two process wake-ups while nobody else
waits. Versions stay unique: the node and its writer process stamp theirs with
different residues (see :mod:`dynaq.storage.embedded_commit_core`).

With ``address``, the committer starts no process: it connects to the writer
process a node's supervisor runs for all its workers
(:mod:`dynaq.storage.embedded_writer_host`), whose commits then group the
writes of every worker and never contend for LMDB's write lock. If that writer
dies, the same holds: what it had not answered fails, and the committer
connects again (to the new one the supervisor starts) until it is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import sys
from collections.abc import Callable
from typing import Any, cast

import msgpack

from dynaq.errors import InsufficientStorage, StorageError, StorageUnavailable
from dynaq.storage.embedded_commit_core import LoopCommits, WriteRequest, resolve_all
from dynaq.storage.embedded_writer_host import socket_path
from dynaq.tasks import cancel_and_wait

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
RESTART_DELAY_S = 0.2
STOP_TIMEOUT_S = 30.0


class _Link(asyncio.Protocol):
    """The socket to one writer process: its answers are handled as they arrive (in
    ``data_received``, with no task in between), and its end is a future."""

    def __init__(self, on_answer: Callable[[Any], None]) -> None:
        self._on_answer = on_answer
        self._unpacker = msgpack.Unpacker(raw=False, use_list=True)
        self.transport: asyncio.Transport | None = None
        self.hello: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport instances, but have its methods.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._unpacker.feed(data)
        for message in self._unpacker:
            if not self.hello.done():
                self.hello.set_result(message)
            else:
                self._on_answer(message)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.hello.done():
            self.hello.set_result(None)
        if not self.lost.done():
            self.lost.set_result(None)


class ProcessCommitter:
    """Submits writes to a writer process; same interface as
    :class:`~dynaq.storage.embedded_commits.GroupCommitter`."""

    def __init__(
        self,
        options: dict[str, Any],
        on_commit: Callable[[float], None] | None = None,
        *,
        address: str | None = None,
        on_loop: LoopCommits | None = None,
    ) -> None:
        self._options = options
        self._address = address
        self._on_commit = on_commit
        self._on_loop = on_loop
        """Commits lone writes in this process (None: every write goes to the writer
        process). Only for a writer process of this node's own, which commits for
        nobody else: when none of its frames is unanswered it is idle, and LMDB's
        write lock is free."""
        self._last_frame = 1
        """How many writes the last frame answered (a lone write commits here only
        after a lone one: concurrent writers keep sharing the writer's commits)."""
        self._pending: list[WriteRequest] = []
        self._frames: dict[int, list[WriteRequest]] = {}
        self._seq = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._link: _Link | None = None
        self._watch: asyncio.Task[None] | None = None
        self._stopped = False
        self._answered = asyncio.Event()
        self._process_commits = 0
        self._process_ops = 0
        self.restarts = 0

    @property
    def commits(self) -> int:
        """Commits so far, the writer process's and this process's own."""
        local = 0 if self._on_loop is None else self._on_loop.core.commits
        return self._process_commits + local

    @property
    def committed_ops(self) -> int:
        local = 0 if self._on_loop is None else self._on_loop.core.committed_ops
        return self._process_ops + local

    async def start(self) -> None:
        """Start the writer process (or connect to the shared one); raises
        :class:`StorageUnavailable` if it cannot open the store (or does not answer)."""
        await self._open_link()
        self._watch = asyncio.create_task(self._supervise(), name="lmdb-writer-process")

    async def stop(self) -> None:
        """Let the writer process commit what it was sent, then end it."""
        self._stopped = True
        self._flush()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(STOP_TIMEOUT_S):
                while self._frames and self._link is not None:
                    self._answered.clear()
                    await self._answered.wait()
        if self._watch is not None:
            await cancel_and_wait(self._watch)
        await self._end_process()
        self._fail_all("store is closed")

    async def submit(self, kind: int, payload: Any, size: int = 1) -> Any:
        """Send one write (with the rest of this loop iteration's) and wait for its
        commit; its result or error."""
        if self._stopped:
            raise StorageUnavailable("store is closed")
        if self._link is None:
            raise StorageUnavailable("the store's writer process is restarting")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._flush)
        self._pending.append(WriteRequest(kind, payload, fut, None, size=size))
        return await fut

    def _flush(self) -> None:
        if self._frames and not self._stopped:
            # A commit is under way in the writer process, which takes nothing new
            # until it returns: what arrives meanwhile waits here and goes as one
            # frame with that commit's answer (see _answer), which costs both
            # processes one write and one wake-up instead of one per loop iteration.
            return
        reqs, self._pending = self._pending, []
        if not reqs:
            return
        on_loop = self._on_loop
        if (
            on_loop is not None
            and len(reqs) == 1
            and self._last_frame == 1
            and not self._frames
            and not self._stopped
            and self._link is not None
            and on_loop.allowed()
        ):
            on_loop.commit(reqs)
            return
        link = self._link
        if link is None or link.transport is None or link.transport.is_closing():
            for req in reqs:
                req.error = StorageUnavailable("the store's writer process is restarting")
            resolve_all(reqs)
            return
        self._seq += 1
        self._frames[self._seq] = reqs
        link.transport.write(
            msgpack.packb(
                [self._seq, [(r.kind, r.payload, r.size) for r in reqs]], use_bin_type=True
            )
        )

    async def _open_link(self) -> None:
        loop = asyncio.get_running_loop()
        if self._address is None:
            link = await self._spawn()
        else:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                # Connected here, not by the loop: uvloop refuses abstract names.
                # A Unix connect to a listening socket does not wait for the peer.
                await asyncio.to_thread(sock.connect, socket_path(self._address))
                sock.setblocking(False)
                _, link = await loop.create_unix_connection(lambda: _Link(self._answer), sock=sock)
            except OSError as exc:
                sock.close()
                raise StorageUnavailable(
                    f"cannot reach the store's writer process: {exc}"
                ) from None
        hello: Any = None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(START_TIMEOUT_S):
                hello = await link.hello
        if hello is None or hello[0] != "ready":
            if link.transport is not None:
                link.transport.close()
            await self._end_process()
            if hello is None:
                raise StorageUnavailable("the store's writer process did not start")
            raise StorageUnavailable(f"cannot open the embedded store: {hello[1]}")
        self._link = link

    async def _spawn(self) -> _Link:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "dynaq.storage.embedded_writer_child",
                str(theirs.fileno()),
                str(os.getpid()),
                json.dumps(self._options),
                pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        loop = asyncio.get_running_loop()
        _, link = await loop.create_unix_connection(lambda: _Link(self._answer), sock=ours)
        return link

    async def _supervise(self) -> None:
        """Start a new writer process whenever the one running dies (until stopped)."""
        while True:
            link = self._link
            assert link is not None
            await link.lost
            if self._stopped:
                return
            self._link = None
            code = await self._end_process()
            gone = "exited" if code is None else f"exited ({code})"
            self._fail_all(f"the store's writer process {gone}; the write may have landed")
            if self._address is None:
                log.error("store writer process died; starting another", extra={"exit": code})
            else:
                log.error("lost the node's store writer process; connecting again")
            while True:
                await asyncio.sleep(RESTART_DELAY_S)
                try:
                    await self._open_link()
                    self.restarts += 1
                    break
                except StorageUnavailable as exc:
                    log.error(  # noqa: TRY400 - the message says it all; no traceback
                        "store writer process did not start", extra={"error": exc.message}
                    )

    def _answer(self, message: Any) -> None:
        seq, outcomes, (commits, ops, elapsed) = message
        reqs = self._frames.pop(seq, None)
        if reqs is None:  # already failed: the store is closing
            return
        for req, outcome in zip(reqs, outcomes, strict=True):
            if outcome[0]:
                req.result = outcome[1]
            elif outcome[1] == "insufficient":
                req.error = InsufficientStorage(outcome[2])
            elif outcome[1] == "unavailable":
                req.error = StorageUnavailable(outcome[2])
            else:
                req.error = StorageError(f"LMDB write failed: {outcome[2]}")
        resolve_all(reqs)
        self._last_frame = len(reqs)
        if self._pending and not self._frames:
            self._flush()
        self._process_commits, self._process_ops = commits, ops
        if self._on_commit is not None:
            for seconds in elapsed:
                self._on_commit(seconds)
        self._answered.set()

    def _fail_all(self, why: str) -> None:
        """Fail every write sent and not answered, and every write held back for the
        next frame (nobody would send it: the answer that would have is not coming)."""
        held, self._pending = self._pending, []
        for req in held:
            req.error = StorageUnavailable(why)
        resolve_all(held)
        frames, self._frames = self._frames, {}
        for reqs in frames.values():
            for req in reqs:
                req.error = StorageUnavailable(why)
            resolve_all(reqs)
        self._answered.set()

    async def _end_process(self) -> int | None:
        """Close the socket (the writer process ends on its end-of-file) and reap the
        process, killing it if it does not end in time; its exit code."""
        link, self._link = self._link, None
        if link is not None and link.transport is not None:
            link.transport.close()
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        try:
            async with asyncio.timeout(STOP_TIMEOUT_S):
                return await proc.wait()
        except TimeoutError:
            proc.kill()
            return await proc.wait()
