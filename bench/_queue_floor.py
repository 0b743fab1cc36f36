"""The physical floor under ``python -m bench queue``, measured in the same run.

A durable single enqueue cannot answer faster than one HTTP round trip plus
one durable commit, so the bench measures both here, on this machine, minutes
from the dynaq phases:

* :class:`FloorServer` -- ``bench._floor_server`` (a bare aiohttp PUT handler, no
  store) in its own process, loaded by the same client code as dynaq;
* :func:`lmdb_commit_ms` -- a durable LMDB commit of one 256-byte put, made
  directly (LMDB flushes twice per commit: its data pages, then its meta page);
* :func:`settle_disk` -- flush every process's dirty pages before a phase, so a
  phase does not pay for the write-back of the one before (JetStream leaves
  ~90 MB unsynced, and ext4 makes the next fsync wait for part of it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Deadline, free_port, percentiles
from dynaq.testing.process import is_healthy, stop_process

_ROOT = Path(__file__).resolve().parent.parent


class FloorServer:
    """``python -m bench._floor_server`` on a free port of 127.0.0.1."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.log_path = tmp / "floor-server.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench._floor_server", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=_ROOT,
            )
        deadline = Deadline(15.0)
        while not deadline.expired():
            if self.proc.poll() is not None:
                raise RuntimeError(f"floor server exited:\n{self.log_path.read_text()[-2000:]}")
            if is_healthy(self.url, 0.5):
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("floor server did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        stop_process(self.proc)


def lmdb_commit_ms(directory: Path, samples: int = 200, seconds: float = 3.0) -> dict[str, float]:
    """Percentiles (ms) of one durable LMDB commit of one 256-byte put, with the
    store's settings (``sync``, ``metasync``). Bounded by ``samples`` and ``seconds``."""
    import lmdb

    path = Path(tempfile.mkdtemp(prefix="lmdb-floor-", dir=directory))
    env = lmdb.open(str(path), map_size=1024**3, max_dbs=4, sync=True, metasync=True)
    try:
        db = env.open_db(b"kv")
        value = os.urandom(264)
        out: list[float] = []
        deadline = Deadline(seconds)
        i = 0
        while len(out) < samples and not deadline.expired():
            t0 = time.perf_counter()
            with env.begin(write=True, db=db) as txn:
                txn.put(i.to_bytes(8, "big"), value)
            out.append((time.perf_counter() - t0) * 1000)
            i += 1
    finally:
        env.close()
        shutil.rmtree(path, ignore_errors=True)
    return percentiles(out)


def settle_disk() -> None:
    """Write back every dirty page on the machine (``sync(2)``), so the next phase
    starts on a quiet disk."""
    os.sync()
