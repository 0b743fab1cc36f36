"""The embedded store's reserve: how much a write may still add before the
store is full (see "A full store" in :mod:`dynaq.storage.embedded`).

Asked by the writer thread inside each commit that adds messages; the LMDB
map's use comes from the B-tree's stats, the disk's from ``statvfs``.
"""

from __future__ import annotations

import os
from typing import Any

import lmdb

from dynaq.errors import InsufficientStorage

# B-tree page counts in an LMDB stat: what a database occupies.
_PAGE_KINDS = ("branch_pages", "leaf_pages", "overflow_pages")
# Pages LMDB needs besides the data tree (two meta pages, the main DB, the free list).
_BASE_PAGES = 8
# How many commits may reuse one statvfs answer, and how close to the disk
# reserve every commit asks again (see Reserve._disk_free).
_DISK_RECHECK_COMMITS = 256
_DISK_NEAR_BYTES = 256 * 1024**2


class Reserve:
    """What message writes may still add to one LMDB environment.

    ``fill_bytes`` of the ``map_size`` may hold data; ``min_free_disk`` bytes
    of the disk under ``path`` are kept for deletes. Used by one thread (the
    writer) only.
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
    ) -> None:
        self._env = env
        self._db = db
        self._path = path
        self._map_size = map_size
        self._fill_bytes = fill_bytes
        self._min_free_disk = min_free_disk
        self._psize = int(env.stat()["psize"])
        self._disk_cached: int | None = None
        self._disk_reuses = 0
        self._disk_file_bytes = self._file_bytes()

    def room(self, txn: Any) -> tuple[int, str]:
        """Bytes message writes may still add before the reserve, and what limits them.

        The map: pages in use (the B-tree's own stats, so pages freed by deletes
        are free again) against ``fill_limit``. The disk: what the file system
        has left plus the free pages inside the file (it never shrinks, LMDB
        reuses them), less ``min_free_disk``.
        """
        stat = txn.stat(self._db)
        psize = stat["psize"]
        used = (sum(stat[k] for k in _PAGE_KINDS) + _BASE_PAGES) * psize
        room = self._fill_bytes - used
        why = (
            f"the store is full ({self._fill_bytes * 100 // self._map_size}% of its "
            f"{self._map_size // 1024**2} MiB map): message writes are refused until "
            "consumers drain the queue"
        )
        # One env.info() per commit: py-lmdb gives the GIL away around each.
        file_bytes = self._file_bytes()
        disk = self._disk_free(file_bytes)
        if disk is not None:
            in_file = max(0, file_bytes - used)
            disk_room = disk + in_file - self._min_free_disk
            if disk_room < room:
                room = disk_room
                why = (
                    f"the disk under the store is nearly full (a reserve of "
                    f"{self._min_free_disk // 1024**2} MiB is kept for deletes): message "
                    "writes are refused until consumers drain the queue"
                )
        return max(0, room), why

    def _disk_free(self, file_bytes: int) -> int | None:
        """Bytes the file system under the store has left for us (``None``: unknown).

        ``statvfs`` is a system call, and every call from this thread gives the
        GIL away and waits to get it back from a busy event loop, so far from the
        limit its answer is reused for up to :data:`_DISK_RECHECK_COMMITS`
        commits, less what the store's file grew since (other writers on the
        disk are caught at the next check). Within :data:`_DISK_NEAR_BYTES` of
        ``min_free_disk`` it is asked on every commit, as the reserve needs.
        """
        growth = file_bytes - self._disk_file_bytes
        cached = self._disk_cached
        self._disk_reuses += 1
        if (
            cached is not None
            and self._disk_reuses < _DISK_RECHECK_COMMITS
            and cached - growth > self._min_free_disk + _DISK_NEAR_BYTES
        ):
            return cached - growth
        self._disk_reuses = 0
        self._disk_file_bytes += growth
        self._disk_cached = self._statvfs_free()
        return self._disk_cached

    def _statvfs_free(self) -> int | None:
        """What the file system says it has left for us now (``None``: unknown)."""
        try:
            st = os.statvfs(self._path)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def _file_bytes(self) -> int:
        """How far the store's file reaches (LMDB grows it page by page as it needs)."""
        info = self._env.info()
        return int(info["last_pgno"] + 1) * self._psize

    def translate(self, exc: lmdb.Error) -> BaseException:
        """An LMDB write error as the caller sees it: a full map or disk is a 507."""
        if isinstance(exc, lmdb.MapFullError):
            return InsufficientStorage(f"the store's LMDB map is full: {exc}")
        disk = self._statvfs_free()
        if disk is not None and disk < max(self._min_free_disk, 1024**2):
            return InsufficientStorage(f"the disk under the store is full: {exc}")
        return exc
