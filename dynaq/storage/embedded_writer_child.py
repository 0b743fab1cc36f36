"""The embedded store's writer process: the program ``embedded.writer = "process"`` runs.

``python -m dynaq.storage.embedded_writer_child FD PARENT_PID OPTIONS_JSON``: FD
is this end of a socket pair to the node, OPTIONS_JSON the store's settings
(:class:`~dynaq.storage.embedded_commit_core.CommitCore`'s arguments and the
path). It opens the LMDB environment, answers ``["ready"]`` (or ``["failed",
why]``), then commits what the node sends, as the writer thread does: every
frame already received in one transaction and one fsync. It never waits for
more: the node sends nothing new while a commit is under way, and sends what
gathered meanwhile as one frame once it is answered (see
:mod:`dynaq.storage.embedded_writer`).

Protocol (msgpack, streamed): the node sends ``[seq, [[kind, payload, size],
...]]`` (a batch's operations as ``[key, value]`` puts and ``[key]`` deletes);
this process answers each frame, once all its requests are committed, with
``[seq, [[1, result] | [0, error kind, message], ...], [commits, ops,
[commit seconds, ...]]]``. It ends when the node closes the socket (after
committing what it received) or dies (``PR_SET_PDEATHSIG`` on Linux, and the
socket's end-of-file everywhere), so it never outlives its node.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import sys
import time
from collections import deque
from typing import Any

import lmdb
import msgpack

from dynaq.errors import InsufficientStorage, StorageUnavailable
from dynaq.storage.base import Delete, Put
from dynaq.storage.embedded_commit_core import (
    BATCH,
    CommitCore,
    WriteRequest,
    open_environment,
    settings_from_wire,
)

_READ_BYTES = 1 << 20
_PR_SET_PDEATHSIG = 1

Frame = list[Any]
"""``[seq, requests, not yet committed]``."""


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the node died before the line above
        os._exit(1)


def _request(raw: list[Any], frame: Frame) -> WriteRequest:
    kind, payload, size = raw
    if kind == BATCH:
        payload = [Put(op[0], op[1]) if len(op) == 2 else Delete(op[0]) for op in payload]
    elif isinstance(payload, list):
        payload = tuple(payload)
    # ``future`` holds the request's frame: this process has no futures.
    return WriteRequest(kind, payload, frame, None, size=size)


def _outcome(req: WriteRequest) -> list[Any]:
    err = req.error
    if err is None:
        return [1, req.result]
    if isinstance(err, InsufficientStorage):
        return [0, "insufficient", err.message]
    if isinstance(err, StorageUnavailable):
        return [0, "unavailable", err.message]
    return [0, "storage", str(err)]


class WriterProcess:
    """Reads frames from the node, commits them in groups, answers each frame."""

    def __init__(self, sock: socket.socket, core: CommitCore) -> None:
        self._sock = sock
        self._core = core
        self._unpacker = msgpack.Unpacker(raw=False, use_list=True, max_buffer_size=1 << 31)
        self._frames: deque[Frame] = deque()
        self._waiting: list[WriteRequest] = []
        self._eof = False
        self._elapsed: list[float] = []

    def serve(self) -> None:
        """Commit until the node closes the socket and everything received is answered."""
        while True:
            if not self._waiting:
                if self._eof:
                    return
                self._receive(timeout=None)
                continue
            self._receive(timeout=0)
            batch, self._waiting = self._core.take(self._waiting)
            started = time.perf_counter()
            self._core.commit(batch)
            self._elapsed.append(time.perf_counter() - started)
            for req in batch:
                req.future[2] -= 1
            self._answer_done()

    def _receive(self, timeout: float | None) -> None:
        """Take in what the node sent, waiting up to ``timeout`` (None: until something)."""
        if self._eof:
            return
        ready, _, _ = select.select([self._sock], [], [], timeout)
        while ready:
            data = self._sock.recv(_READ_BYTES)
            if not data:
                self._eof = True
                return
            self._unpacker.feed(data)
            for seq, raws in self._unpacker:
                frame: Frame = [seq, [], len(raws)]
                frame[1] = [_request(raw, frame) for raw in raws]
                self._frames.append(frame)
                self._waiting.extend(frame[1])
            ready, _, _ = select.select([self._sock], [], [], 0)

    def _answer_done(self) -> None:
        out: list[bytes] = []
        while self._frames and self._frames[0][2] == 0:
            seq, reqs, _ = self._frames.popleft()
            stats = [self._core.commits, self._core.committed_ops, self._elapsed]
            self._elapsed = []
            out.append(msgpack.packb([seq, [_outcome(r) for r in reqs], stats]))
        if out:
            self._sock.sendall(b"".join(out))


def main(argv: list[str]) -> int:
    fd, parent_pid, options = int(argv[0]), int(argv[1]), json.loads(argv[2])
    _die_with_parent(parent_pid)
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    try:
        path = options.pop("path")
        settings = settings_from_wire(options)
        env = open_environment(path, settings["map_size"])
        db = env.open_db(b"kv")
        core = CommitCore(env, db, path, **settings)
    except (lmdb.Error, OSError, KeyError, TypeError, ValueError) as exc:
        sock.sendall(msgpack.packb(["failed", f"{type(exc).__name__}: {exc}"]))
        return 1
    sock.sendall(msgpack.packb(["ready"]))
    try:
        WriterProcess(sock, core).serve()
    except (BrokenPipeError, ConnectionResetError):
        return 0  # the node is gone: nobody waits for an answer
    finally:
        env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
