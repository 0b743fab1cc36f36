"""Dedup checks across the worker processes of one node.

A node of several workers (``http.workers``) runs one writer per process over
one shared store, and each process serialises its own dedup checks
(:class:`~dynaq.services.queues.dedup.Dedup`'s locks and in-flight table). Two
workers, though, could both check a dedup id, both find nothing and both store
a copy. :class:`DedupFileLock` closes that race with POSIX record locks on one
file in the data directory: a write that carries dedup ids holds one byte-range
slot per (queue, dedup id) from before its check until its write has landed,
so a second process with the same id waits and then finds the first record.
Different ids hash to different slots (65,536 of them) and do not wait for
each other. The kernel drops a dead process's locks, ``kill -9`` included.

Record locks belong to the process, not to a coroutine, so slots are counted
per process: the first taker locks, the last one to let go unlocks. Slots are
taken in ascending order, so two processes never wait on each other in a cycle.
Waiting never blocks the event loop: a slot another process holds is retried
(non-blocking) after a short pause, doubling to 10 ms.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import zlib
from collections.abc import Iterable
from pathlib import Path

_SLOTS = 1 << 16
_FIRST_PAUSE_S = 0.0005
_LONGEST_PAUSE_S = 0.01


class DedupFileLock:
    """Per-(queue, dedup id) slots of one lock file, shared by a node's workers."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Kept open for the process's life: closing any descriptor of the file
        # would drop every record lock this process holds on it.
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        self._held: dict[int, int] = {}

    @staticmethod
    def slots_for(number: int, dedup_ids: Iterable[str]) -> list[int]:
        """The slots of ``dedup_ids`` in queue ``number``, ascending, each once."""
        return sorted({zlib.crc32(f"{number}\0{d}".encode()) % _SLOTS for d in dedup_ids})

    async def acquire(self, slots: list[int]) -> None:
        """Take ``slots`` (ascending) for this process; wait for other processes."""
        taken: list[int] = []
        try:
            for slot in slots:
                if slot not in self._held:
                    # (Another coroutine of this process may take the slot while this
                    # one waits: the count, not this call, says who unlocks it.)
                    await self._lock(slot)
                self._held[slot] = self._held.get(slot, 0) + 1
                taken.append(slot)
        except BaseException:
            self.release(taken)
            raise

    def release(self, slots: Iterable[int]) -> None:
        for slot in slots:
            left = self._held[slot] - 1
            if left:
                self._held[slot] = left
            else:
                del self._held[slot]
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, slot)

    async def _lock(self, slot: int) -> None:
        pause = _FIRST_PAUSE_S
        while True:
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot)
                return
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, _LONGEST_PAUSE_S)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
