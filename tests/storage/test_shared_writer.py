"""The writer process a node's workers share (``http.workers`` > 1 with
``embedded.writer = "process"``): writes from several processes share its
commits; its versions decide conditional puts across them; its death fails only
what it had not answered, and the workers connect to the next one; it refuses
other users; it stops cleanly after answering what it received."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dynaq.errors import StorageUnavailable
from dynaq.storage.embedded import LmdbStore
from dynaq.storage.embedded_writer import ProcessCommitter
from dynaq.storage.embedded_writer_host import SharedWriter, socket_path
from tests.storage.writers import until_writes_succeed

MAP = 64 * 1024**2
REPO = str(Path(__file__).resolve().parents[2])

# A second "worker": another process that opens the same store through the shared
# writer, writes, then races this process for one key with conditional puts.
_OTHER_WORKER = """
import asyncio, sys
from dynaq.storage.embedded import LmdbStore

async def main() -> None:
    s = LmdbStore(sys.argv[1], map_size=int(sys.argv[3]), min_free_disk=0,
                  writer_address=sys.argv[2])
    await s.open()
    await asyncio.gather(*(s.put(b"w1-%05d" % i, b"v") for i in range(3000)))
    won = 0
    for _ in range(300):
        item = await s.get(b"race")
        if await s.put_if_version(b"race", b"w1", item.version) is not None:
            won += 1
    print(won, flush=True)
    await s.close()

asyncio.run(main())
"""


def _store(path: Path, address: str | None = None) -> LmdbStore:
    return LmdbStore(path, map_size=MAP, min_free_disk=0, writer_address=address)


async def _shared(path: Path) -> SharedWriter:
    writer = SharedWriter(_store(path).shared_writer_options())
    await writer.start()
    return writer


@contextlib.asynccontextmanager
async def _through_shared_writer(path: Path) -> AsyncIterator[tuple[SharedWriter, LmdbStore]]:
    """A shared writer for the store at ``path``, and this process's store using it."""
    writer = await _shared(path)
    store = _store(path, writer.address)
    try:
        await store.open()
        yield writer, store
    finally:
        await store.close()
        await writer.stop()


async def test_two_processes_share_its_commits_and_its_versions_decide_their_races(
    tmp_path: Path,
) -> None:
    db = tmp_path / "db"
    async with _through_shared_writer(db) as (writer, store):
        await store.put(b"race", b"start")
        other = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _OTHER_WORKER,
            str(db),
            writer.address,
            str(MAP),
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": REPO},
        )
        versions = await asyncio.gather(*(store.put(b"w0-%05d" % i, b"v") for i in range(3000)))
        won = 0
        for _ in range(300):
            item = await store.get(b"race")
            assert item is not None
            if await store.put_if_version(b"race", b"w0", item.version) is not None:
                won += 1
        out, _ = await asyncio.wait_for(other.communicate(), 60)
        assert other.returncode == 0
        other_won = int(out.decode())
        # Every write from both processes is there, each with its own version.
        assert len(set(versions)) == 3000
        assert len(await store.list_keys(b"w0-", 10_000)) == 3000
        assert len(await store.list_keys(b"w1-", 10_000)) == 3000
        # One writer stamps every version: a conditional put wins only against
        # the version it read, so the winners' count is the number of changes.
        assert won + other_won >= 300
        committer = store._writer
        assert isinstance(committer, ProcessCommitter)
        # 6,000 puts from two processes took far fewer commits (shared groups).
        assert committer.commits < 3000, committer.commits


async def test_a_killed_shared_writer_fails_only_what_it_had_not_answered(
    tmp_path: Path,
) -> None:
    db = tmp_path / "db"
    async with _through_shared_writer(db) as (writer, store):
        await store.put(b"before", b"v")
        first = writer.pid
        assert first is not None
        writes = [asyncio.ensure_future(store.put(b"k%05d" % i, b"v")) for i in range(2000)]
        await asyncio.sleep(0)
        os.kill(first, signal.SIGKILL)
        results = await asyncio.wait_for(asyncio.gather(*writes, return_exceptions=True), 30)
        failed = [r for r in results if isinstance(r, BaseException)]
        assert all(isinstance(r, StorageUnavailable) for r in failed), failed[:3]
        await until_writes_succeed(store, 15)
        assert writer.starts == 2 and writer.pid not in (None, first)
        assert isinstance(store._writer, ProcessCommitter) and store._writer.restarts == 1
        for i, r in enumerate(results):
            if not isinstance(r, BaseException):
                assert await store.get(b"k%05d" % i) is not None, i
        assert await store.get(b"before") is not None


async def test_it_stops_after_answering_and_then_refuses_connections(tmp_path: Path) -> None:
    db = tmp_path / "db"
    writer = await _shared(db)
    store = _store(db, writer.address)
    await store.open()
    await asyncio.gather(*(store.put(b"k%d" % i, b"v") for i in range(100)))
    await store.close()
    proc = writer._proc
    await writer.stop()
    assert proc is not None and proc.returncode == 0
    late = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with late, pytest.raises(ConnectionRefusedError):
        await asyncio.to_thread(late.connect, socket_path(writer.address))
    again = _store(db)
    await again.open()
    try:
        assert len(await again.list_keys(b"k", 1000)) == 100
    finally:
        await again.close()


async def test_a_writer_that_cannot_open_the_store_is_restarted_with_growing_pauses(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "a-file"
    await asyncio.to_thread(blocker.write_bytes, b"")
    writer = SharedWriter(_store(blocker / "db").shared_writer_options())
    await writer.start()
    try:
        await asyncio.sleep(2.5)
        # 0.2 + 0.4 + 0.8 s of pauses (plus start-up): never a spin.
        assert 2 <= writer.starts <= 5, writer.starts
    finally:
        await writer.stop()


# The probe runs as nobody, who may not read this virtualenv: the system's Python.
_SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
@pytest.mark.skipif(_SYSTEM_PYTHON is None, reason="needs a system python3 for the probe")
async def test_it_refuses_a_connection_from_another_user(tmp_path: Path) -> None:
    db = tmp_path / "db"
    writer = await _shared(db)
    probe = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_UNIX)\n"
        "s.settimeout(10)\n"
        "s.connect('\\0' + sys.argv[1][1:])\n"
        "print(repr(s.recv(100)))\n"
    )
    try:
        result = await asyncio.to_thread(
            subprocess.run,
            [str(_SYSTEM_PYTHON), "-c", probe, writer.address],
            user=65534,
            capture_output=True,
            text=True,
            timeout=30,
        )
        # Closed without a hello: no ["ready"], so nothing can be written.
        assert result.stdout.strip() == "b''", (result.stdout, result.stderr)
    finally:
        await writer.stop()
