"""What a node process claims for itself before it serves: its data directory
(:class:`DataDirLock`) and its HTTP address (:func:`listen`). Either taken by
another process is a :class:`~dynaq.errors.CannotStart`, one line, not a traceback.

One node process per data directory: an exclusive lock on ``<data.dir>/LOCK``.

A node keeps per-process state over its store (what is in flight, the id
clock, the partitions it serves): a second process opening the same
directory would serve every message the first one serves, and run its
upkeep over the first one's data. The second one refuses to start instead.

The lock is ``flock(2)`` on a file in the directory, so the kernel drops it
whenever its holder dies (``kill -9`` included): nothing stale is left to
clean up. The holder writes its pid into the file for the error message.
Taken by the process that owns the directory: the node itself, or the
supervisor of its workers (which open the store under the supervisor's lock).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from aiohttp import web

from dynaq.errors import CannotStart

LOCK_NAME = "LOCK"


class DataDirLock:
    """The exclusive lock on one data directory, held until :meth:`release`
    (or the process's end)."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.path = Path(data_dir) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock; :class:`CannotStart` if another process holds it or the
        directory cannot hold its lock file."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise CannotStart(
                f"cannot lock data directory {str(self.path.parent)!r}: {exc.strerror or exc}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f" (pid {holder})" if holder else ""
            raise CannotStart(
                f"data directory {str(self.path.parent)!r} is in use by another dynaq "
                f"process{who}; give each node its own data.dir (DYNAQ_DATA_DIR)"
            ) from None
        # The pid tells a second process who holds the lock. Written in place at a
        # fixed width (no truncate, which would free the file's block, so a node
        # restarted on a full disk still starts). A disk with no room even for
        # that cannot hold a new store either (LMDB would die of SIGBUS on it).
        try:
            os.pwrite(fd, f"{os.getpid():<20}\n".encode(), 0)
        except OSError as exc:
            os.close(fd)
            raise CannotStart(
                f"cannot start in data directory {str(self.path.parent)!r}: {exc.strerror or exc}"
            ) from None
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (the file stays: removing it could race a new holder)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> DataDirLock:
        self.acquire()
        return self

    def __exit__(self, *_: object) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


async def listen(site: web.TCPSite, host: str, port: int) -> None:
    """Start listening; :class:`CannotStart` names the address if the OS refuses it
    (taken, not this machine's, a privileged port)."""
    try:
        await site.start()
    except OSError as exc:
        raise CannotStart(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
