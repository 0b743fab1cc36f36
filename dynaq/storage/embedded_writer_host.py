"""The writer process shared by every worker of a node (``http.workers`` > 1 with
``embedded.writer = "process"``): the supervisor's side of it.

The supervisor owns the listening Unix socket (an abstract name on Linux, which
vanishes with its last holder, written ``@name``; elsewhere a file in a private
directory) for its
whole life and hands it to each writer process it starts
(:mod:`dynaq.storage.embedded_writer_child` ``--listen``). Workers connect to
:attr:`SharedWriter.address` (:class:`~dynaq.storage.embedded_writer.ProcessCommitter`
``address``). Because the socket outlives any one writer process, a worker that
connects while a new one starts waits in the socket's backlog instead of being
refused.

Guarantees: one writer process at a time commits for the whole node, so the
workers' writes share group commits and never contend for LMDB's write lock. A
writer process that dies is started again (at once, or after a pause that
doubles up to 10 s when it keeps dying young, as one that cannot open the store
does); the writes it had not answered fail in their workers with
:class:`~dynaq.errors.StorageUnavailable`. :meth:`SharedWriter.stop` lets it
commit and answer what it received, then ends it. It dies with the supervisor
(``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import socket
import sys
import tempfile
from typing import Any

from dynaq.tasks import cancel_and_wait

log = logging.getLogger(__name__)

_QUICK_EXIT_S = 5.0
_FIRST_PAUSE_S = 0.2
_MAX_PAUSE_S = 10.0
_STOP_TIMEOUT_S = 30.0
_BACKLOG = 128


def socket_path(address: str) -> str:
    """What to bind or connect to for ``address``: ``@name`` is Linux's abstract
    ``\\0name`` (written so, it can go in an environment variable or argument)."""
    return "\0" + address[1:] if address.startswith("@") else address


def _listen() -> tuple[socket.socket, str, str | None]:
    """A listening Unix socket, its address, and the directory to remove after (if any)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    directory: str | None = None
    try:
        if sys.platform.startswith("linux"):
            address = "@dynaq-writer-" + secrets.token_hex(12)
        else:
            directory = tempfile.mkdtemp(prefix="dynaq-writer-")  # mode 0700
            address = os.path.join(directory, "w.sock")
        sock.bind(socket_path(address))
        sock.listen(_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock, address, directory


class SharedWriter:
    """Runs, and restarts, the one writer process of a node's workers.

    ``options`` are the store's commit settings and path
    (:meth:`~dynaq.storage.embedded.LmdbStore.writer_options`)."""

    def __init__(self, options: dict[str, Any]) -> None:
        self._options = options
        self._listener: socket.socket | None = None
        self._directory: str | None = None
        self.address = ""
        """Where workers connect (set by :meth:`start`)."""
        self._proc: asyncio.subprocess.Process | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._stopping = False
        self.starts = 0
        """Writer processes started so far (a restart counts)."""

    @property
    def pid(self) -> int | None:
        """The running writer process's id."""
        p = self._proc
        return None if p is None or p.returncode is not None else p.pid

    async def start(self) -> None:
        """Listen and start the first writer process (workers may connect at once)."""
        self._listener, self.address, self._directory = _listen()
        self._keeper = asyncio.create_task(self._keep(), name="store-writer-process")

    async def stop(self) -> None:
        """End the writer process once it answered what it received (SIGTERM; SIGKILL
        after 30 s), and stop listening."""
        self._stopping = True
        if self._keeper is not None:
            await cancel_and_wait(self._keeper)
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(_STOP_TIMEOUT_S):
                    await proc.wait()
            except TimeoutError:
                log.warning("store writer process did not stop in time; killing it")
                proc.kill()
                await proc.wait()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._directory is not None:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self._directory, "w.sock"))
                os.rmdir(self._directory)

    async def _spawn(self) -> asyncio.subprocess.Process:
        assert self._listener is not None
        fd = self._listener.fileno()
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "dynaq.storage.embedded_writer_child",
            "--listen",
            str(fd),
            str(os.getpid()),
            json.dumps(self._options),
            pass_fds=(fd,),
            stdin=asyncio.subprocess.DEVNULL,
        )
        self._proc = proc
        self.starts += 1
        log.info("store writer process started", extra={"pid": proc.pid})
        return proc

    async def _keep(self) -> None:
        loop = asyncio.get_running_loop()
        pause = _FIRST_PAUSE_S
        while not self._stopping:
            started = loop.time()
            proc = await self._spawn()
            code = await proc.wait()
            if self._stopping:
                return
            log.error(
                "store writer process exited; starting another",
                extra={"exit": code, "lived_s": round(loop.time() - started, 1)},
            )
            if loop.time() - started < _QUICK_EXIT_S:
                await asyncio.sleep(pause)
                pause = min(pause * 2, _MAX_PAUSE_S)
            else:
                pause = _FIRST_PAUSE_S
