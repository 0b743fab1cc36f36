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
from typing import Any

import msgpack

from dynaq.errors import InsufficientStorage, StorageError, StorageUnavailable
from dynaq.storage.embedded_commit_core import WriteRequest, resolve_all
from dynaq.tasks import cancel_and_wait

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
RESTART_DELAY_S = 0.2
STOP_TIMEOUT_S = 30.0
_READ_BYTES = 1 << 20


class ProcessCommitter:
    """Submits writes to a writer process; same interface as
    :class:`~dynaq.storage.embedded_commits.GroupCommitter`."""

    def __init__(
        self, options: dict[str, Any], on_commit: Callable[[float], None] | None = None
    ) -> None:
        self._options = options
        self._on_commit = on_commit
        self._pending: list[WriteRequest] = []
        self._frames: dict[int, list[WriteRequest]] = {}
        self._seq = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._up = asyncio.Event()
        self._stopped = False
        self._answered = asyncio.Event()
        self._unpacker = msgpack.Unpacker(raw=False, use_list=True)
        self.commits = 0
        self.committed_ops = 0
        self.restarts = 0

    async def start(self) -> None:
        """Start the writer process; raises :class:`StorageUnavailable` if it cannot
        open the store."""
        reader = await self._spawn()
        self._reader_task = asyncio.create_task(self._run(reader), name="lmdb-writer-process")

    async def stop(self) -> None:
        """Let the writer process commit what it was sent, then end it."""
        self._stopped = True
        self._flush()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(STOP_TIMEOUT_S):
                while self._frames and self._up.is_set():
                    self._answered.clear()
                    await self._answered.wait()
        if self._reader_task is not None:
            await cancel_and_wait(self._reader_task)
        await self._end_process()
        self._fail_all("store is closed")

    async def submit(self, kind: int, payload: Any, size: int = 1) -> Any:
        """Send one write (with the rest of this loop iteration's) and wait for its
        commit; its result or error."""
        if self._stopped:
            raise StorageUnavailable("store is closed")
        if not self._up.is_set():
            raise StorageUnavailable("the store's writer process is restarting")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        self._pending.append(WriteRequest(kind, payload, fut, None, size=size))
        return await fut

    def _flush(self) -> None:
        reqs, self._pending = self._pending, []
        if not reqs:
            return
        if self._writer is None or not self._up.is_set():
            for req in reqs:
                req.error = StorageUnavailable("the store's writer process is restarting")
            resolve_all(reqs)
            return
        self._seq += 1
        self._frames[self._seq] = reqs
        self._writer.write(
            msgpack.packb(
                [self._seq, [(r.kind, r.payload, r.size) for r in reqs]], use_bin_type=True
            )
        )

    async def _spawn(self) -> asyncio.StreamReader:
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
        reader, writer = await asyncio.open_unix_connection(sock=ours, limit=_READ_BYTES)
        unpacker = msgpack.Unpacker(raw=False, use_list=True)
        hello = await self._hello(reader, unpacker)
        if hello is None:
            writer.close()
            await self._end_process()
            raise StorageUnavailable("the store's writer process did not start in time")
        if hello[0] != "ready":
            writer.close()
            await self._end_process()
            raise StorageUnavailable(f"cannot open the embedded store: {hello[1]}")
        self._writer = writer
        self._unpacker = unpacker
        self._up.set()
        return reader

    @staticmethod
    async def _hello(reader: asyncio.StreamReader, unpacker: msgpack.Unpacker) -> Any:
        """The writer process's first message, or None if it ended or took too long."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(START_TIMEOUT_S):
                while data := await reader.read(_READ_BYTES):
                    unpacker.feed(data)
                    hello = next(iter(unpacker), None)
                    if hello is not None:
                        return hello
        return None

    async def _run(self, reader: asyncio.StreamReader) -> None:
        """Answer frames as their commits return; start a new writer process if this
        one dies (until the store is closed)."""
        while True:
            try:
                await self._read_answers(reader)
            except (ConnectionError, OSError) as exc:
                log.warning("store writer process connection failed", extra={"error": repr(exc)})
            if self._stopped:
                return
            self._up.clear()
            self._writer = None
            code = await self._end_process()
            self._fail_all(f"the store's writer process exited ({code}); the write may have landed")
            log.error("store writer process died; starting another", extra={"exit": code})
            while True:
                await asyncio.sleep(RESTART_DELAY_S)
                try:
                    reader = await self._spawn()
                    self.restarts += 1
                    break
                except StorageUnavailable as exc:
                    log.error(  # noqa: TRY400 - the message says it all; no traceback
                        "store writer process did not start", extra={"error": exc.message}
                    )

    async def _read_answers(self, reader: asyncio.StreamReader) -> None:
        unpacker = self._unpacker
        self._consume(unpacker)  # anything that came with the hello
        while True:
            data = await reader.read(_READ_BYTES)
            if not data:
                return
            unpacker.feed(data)
            self._consume(unpacker)

    def _consume(self, unpacker: msgpack.Unpacker) -> None:
        for seq, outcomes, (commits, ops, elapsed) in unpacker:
            reqs = self._frames.pop(seq)
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
            self.commits, self.committed_ops = commits, ops
            if self._on_commit is not None:
                for seconds in elapsed:
                    self._on_commit(seconds)
        self._answered.set()

    def _fail_all(self, why: str) -> None:
        frames, self._frames = self._frames, {}
        for reqs in frames.values():
            for req in reqs:
                req.error = StorageUnavailable(why)
            resolve_all(reqs)
        self._answered.set()

    async def _end_process(self) -> int | None:
        """Close the socket (the writer process ends on its end-of-file) and reap the
        process, killing it if it does not end in time; its exit code."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        try:
            async with asyncio.timeout(STOP_TIMEOUT_S):
                return await proc.wait()
        except TimeoutError:
            proc.kill()
            return await proc.wait()
