"""The embedded store's writer process: the program ``embedded.writer = "process"`` runs.

Two ways to run it:

* ``python -m dynaq.storage.embedded_writer_child FD PARENT_PID OPTIONS_JSON``: one
  node's own writer. FD is this end of a socket pair to the node. It answers
  ``["ready"]`` (or ``["failed", why]``) and ends when the node closes the socket
  (after committing what it received) or dies.
* ``python -m dynaq.storage.embedded_writer_child --listen FD PARENT_PID
  OPTIONS_JSON``: the writer shared by every worker of a node (see
  :mod:`dynaq.storage.embedded_writer_host`). FD is a listening Unix socket,
  owned by the node's supervisor (PARENT_PID), which outlives this process: a
  worker that connects while a new writer process starts waits in its backlog.
  Each accepted connection (from this user only) is answered ``["ready"]``. It
  ends on SIGTERM, after committing and answering what it received.

Either way it opens the LMDB environment (OPTIONS_JSON: the store's settings,
:class:`~dynaq.storage.embedded_commit_core.CommitCore`'s arguments and the path)
and commits as the writer thread does: every frame already received, from every
connection, in one transaction and one fsync. It never waits for more: a node
sends nothing new while a commit of its is under way, and sends what gathered
meanwhile as one frame once it is answered (see
:mod:`dynaq.storage.embedded_writer`). It never outlives its parent
(``PR_SET_PDEATHSIG`` on Linux; a single node's socket end everywhere).

Protocol (msgpack, streamed): a node sends ``[seq, [[kind, payload, size],
...]]`` (a batch's operations as ``[key, value]`` puts and ``[key]`` deletes);
this process answers each frame on its connection, once all its requests are
committed, with ``[seq, [[1, result] | [0, error kind, message], ...], [commits,
ops, [commit seconds, ...]]]``.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import struct
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
    open_databases,
    open_environment,
    settings_from_wire,
)

_READ_BYTES = 1 << 20
_PR_SET_PDEATHSIG = 1
_PEERCRED = struct.Struct("3i")

Frame = list[Any]
"""``[seq, requests, not yet committed, connection]``."""


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the line above
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


def _same_user(sock: socket.socket) -> bool:
    """Whether the peer of ``sock`` runs as this process's user (Linux; elsewhere the
    socket's file permissions decide)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return True
    _, uid, _ = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, option, _PEERCRED.size))
    return bool(uid == os.getuid())


class _Connection:
    """One node's (or worker's) socket: what it sent, not yet framed."""

    __slots__ = ("open", "sock", "unpacker")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.unpacker = msgpack.Unpacker(raw=False, use_list=True, max_buffer_size=1 << 31)
        self.open = True


class WriterProcess:
    """Reads frames from its connections, commits them in groups, answers each frame.

    With ``listener`` it accepts connections until :meth:`stop`; without, it serves
    ``sock`` until that closes."""

    def __init__(
        self,
        core: CommitCore,
        *,
        sock: socket.socket | None = None,
        listener: socket.socket | None = None,
        wake_fd: int | None = None,
    ) -> None:
        self._core = core
        self._listener = listener
        self._wake_fd = wake_fd
        self._conns: dict[int, _Connection] = {}
        if sock is not None:
            self._conns[sock.fileno()] = _Connection(sock)
        self._frames: deque[Frame] = deque()
        self._waiting: list[WriteRequest] = []
        self._stopping = False
        self._elapsed: list[float] = []

    def serve(self) -> None:
        """Commit until done (see the class docstring) and everything received is answered."""
        while True:
            if not self._waiting:
                if self._finished():
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

    def _finished(self) -> bool:
        if self._listener is not None:
            return self._stopping
        return not self._conns

    def _watched(self) -> list[int]:
        fds = list(self._conns)
        if self._listener is not None and not self._stopping:
            fds.append(self._listener.fileno())
        if self._wake_fd is not None and not self._stopping:
            fds.append(self._wake_fd)
        return fds

    def _receive(self, timeout: float | None) -> None:
        """Take in what was sent, waiting up to ``timeout`` (None: until something)."""
        ready, _, _ = select.select(self._watched(), [], [], timeout)
        while ready:
            for fd in ready:
                self._ready(fd)
            ready, _, _ = select.select(self._watched(), [], [], 0)

    def _ready(self, fd: int) -> None:
        if self._listener is not None and fd == self._listener.fileno():
            self._accept()
            return
        if fd == self._wake_fd:
            os.read(fd, 512)
            self._stopping = True
            return
        conn = self._conns[fd]
        try:
            data = conn.sock.recv(_READ_BYTES)
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        conn.unpacker.feed(data)
        for seq, raws in conn.unpacker:
            frame: Frame = [seq, [], len(raws), conn]
            frame[1] = [_request(raw, frame) for raw in raws]
            self._frames.append(frame)
            self._waiting.extend(frame[1])

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            sock, _ = self._listener.accept()
        except OSError:
            return
        if not _same_user(sock):
            sock.close()
            return
        sock.setblocking(True)
        try:
            sock.sendall(msgpack.packb(["ready"]))
        except OSError:
            sock.close()
            return
        self._conns[sock.fileno()] = _Connection(sock)

    def _drop(self, conn: _Connection) -> None:
        """A connection closed: its frames still commit (they were sent), unanswered."""
        if conn.open:
            conn.open = False
            del self._conns[conn.sock.fileno()]
            conn.sock.close()

    def _answer_done(self) -> None:
        out: dict[_Connection, list[bytes]] = {}
        while self._frames and self._frames[0][2] == 0:
            seq, reqs, _, conn = self._frames.popleft()
            if not conn.open:
                continue
            stats = [self._core.commits, self._core.committed_ops, self._elapsed]
            self._elapsed = []
            out.setdefault(conn, []).append(
                msgpack.packb([seq, [_outcome(r) for r in reqs], stats])
            )
        for conn, answers in out.items():
            try:
                conn.sock.sendall(b"".join(answers))
            except OSError:  # its node is gone: nobody waits for these answers
                self._drop(conn)


def _open_core(options: dict[str, Any]) -> tuple[Any, CommitCore]:
    path = options.pop("path")
    count_messages = bool(options.pop("count_messages", True))
    settings = settings_from_wire(options)
    os.makedirs(path, exist_ok=True)
    env = open_environment(path, settings["map_size"])
    db, counts = open_databases(env, count_messages)
    return env, CommitCore(env, db, path, counts=counts, **settings)


def _serve_pair(fd: int, options: dict[str, Any]) -> int:
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    try:
        env, core = _open_core(options)
    except (lmdb.Error, OSError, KeyError, TypeError, ValueError) as exc:
        sock.sendall(msgpack.packb(["failed", f"{type(exc).__name__}: {exc}"]))
        return 1
    sock.sendall(msgpack.packb(["ready"]))
    try:
        WriterProcess(core, sock=sock).serve()
    finally:
        env.close()
    return 0


def _serve_listener(fd: int, options: dict[str, Any]) -> int:
    listener = socket.socket(fileno=fd)
    listener.setblocking(False)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    # The handler only has to exist: the wake-up byte tells serve() to stop.
    signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        env, core = _open_core(options)
    except (lmdb.Error, OSError, KeyError, TypeError, ValueError) as exc:
        print(
            f"dynaq store writer: cannot open the store: {type(exc).__name__}: {exc}",
            file=sys.stderr,
        )
        return 1
    try:
        WriterProcess(core, listener=listener, wake_fd=wake_r).serve()
    finally:
        env.close()
    return 0


def main(argv: list[str]) -> int:
    listen = bool(argv) and argv[0] == "--listen"
    if listen:
        argv = argv[1:]
    fd, parent_pid, options = int(argv[0]), int(argv[1]), json.loads(argv[2])
    _die_with_parent(parent_pid)
    return _serve_listener(fd, options) if listen else _serve_pair(fd, options)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
