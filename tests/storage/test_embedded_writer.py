"""The embedded store's writer process (``embedded.writer = "process"``): lone writes
commit in the node, writes made together in the writer process, with versions that
never collide; under faults, its death fails what it had not answered and a new one
takes over; what it answered is durable; it never outlives its node; a store it
cannot open is a clear error."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from dynaq.errors import StorageUnavailable
from dynaq.storage import embedded_commit_core
from dynaq.storage.embedded import LmdbStore
from dynaq.storage.embedded_writer import ProcessCommitter
from dynaq.testing.process import node_process
from tests.storage.writers import until_writes_succeed

MAP = 64 * 1024**2


def _writer_pid(store: LmdbStore) -> int:
    committer = store._writer
    assert isinstance(committer, ProcessCommitter) and committer._proc is not None
    return committer._proc.pid


async def test_lone_writes_commit_in_the_node_and_writes_made_together_in_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One write at a time (the writer process idle) commits on the node's loop: no
    frame to the writer process and back. Writes made together go to the writer
    process as one frame, and so does the next lone write after such a group. The
    two committers' versions never collide, so a conditional put still tells them
    apart."""
    # A loaded machine's slow commit would send the next lone writes to the writer
    # process (as it should, not to block the loop): not what this test is about.
    monkeypatch.setattr(embedded_commit_core, "SLOW_ON_LOOP_S", 60.0)
    s = LmdbStore(tmp_path / "db", map_size=MAP, min_free_disk=0, writer="process")
    await s.open()
    try:
        w = s._writer
        assert isinstance(w, ProcessCommitter) and w._on_loop is not None
        here = w._on_loop.core
        versions = [await s.put(b"lone%02d" % i, b"v") for i in range(20)]
        assert (here.commits, w._process_commits) == (20, 0)
        versions += await asyncio.gather(*(s.put(b"group%02d" % i, b"v") for i in range(16)))
        assert (here.commits, w._process_commits) == (20, 1)
        versions.append(await s.put(b"after-group", b"v"))  # to the writer process
        versions.append(await s.put(b"after-lone", b"v"))  # here again
        assert (here.commits, w._process_commits) == (21, 2)
        assert s.commits == 23
        assert len(set(versions)) == len(versions)
        assert {v % 2 for v in versions[:20]} == {1} and {v % 2 for v in versions[20:36]} == {0}
        # A key written by one committer, then by the other: the version read before
        # the second write no longer matches.
        first = await s.put(b"k", b"1")
        second, _ = await asyncio.gather(s.put(b"k", b"2"), s.put(b"other", b"x"))
        assert first != second
        assert await s.put_if_version(b"k", b"3", first) is None
        item = await s.get(b"k")
        assert item is not None and item.value == b"2" and item.version == second
        for key in (b"lone00", b"group15", b"after-group", b"after-lone"):
            assert await s.get(key) is not None, key
    finally:
        await s.close()


async def test_a_killed_writer_fails_its_unanswered_writes_and_another_takes_over(
    tmp_path: Path,
) -> None:
    s = LmdbStore(tmp_path / "db", map_size=MAP, min_free_disk=0, writer="process")
    await s.open()
    try:
        await s.put(b"before", b"v")
        first = _writer_pid(s)
        # Writes racing the kill: each one either lands (answered: then durable and
        # readable) or fails StorageUnavailable; none hangs, none is half-answered.
        writes = [asyncio.ensure_future(s.put(b"k%05d" % i, b"v")) for i in range(2000)]
        await asyncio.sleep(0)
        os.kill(first, signal.SIGKILL)
        results = await asyncio.wait_for(asyncio.gather(*writes, return_exceptions=True), 30)
        failed = [r for r in results if isinstance(r, BaseException)]
        assert all(isinstance(r, StorageUnavailable) for r in failed), failed[:3]
        await until_writes_succeed(s)
        assert _writer_pid(s) != first
        assert isinstance(s._writer, ProcessCommitter) and s._writer.restarts == 1
        for i, r in enumerate(results):
            if not isinstance(r, BaseException):
                assert await s.get(b"k%05d" % i) is not None, i
        assert await s.get(b"before") is not None
    finally:
        await s.close()


async def test_writes_held_back_behind_a_commit_are_answered_when_the_writer_dies(
    tmp_path: Path,
) -> None:
    """Writes made while a commit is under way wait in the node for its answer; if
    the writer process dies instead, they fail too rather than wait forever."""
    s = LmdbStore(tmp_path / "db", map_size=MAP, min_free_disk=0, writer="process")
    await s.open()
    try:
        first = _writer_pid(s)
        sent = [asyncio.ensure_future(s.put(b"a%04d" % i, b"v" * 1000)) for i in range(500)]
        await asyncio.sleep(0)  # the first frame goes out
        held = [asyncio.ensure_future(s.put(b"b%04d" % i, b"v")) for i in range(50)]
        await asyncio.sleep(0)  # these wait in the node behind the first commit
        os.kill(first, signal.SIGKILL)
        results = await asyncio.wait_for(asyncio.gather(*sent, *held, return_exceptions=True), 30)
        failed = [r for r in results if isinstance(r, BaseException)]
        assert all(isinstance(r, StorageUnavailable) for r in failed), failed[:3]
        await until_writes_succeed(s)
    finally:
        await s.close()


async def test_a_closed_store_ends_its_writer_process(tmp_path: Path) -> None:
    s = LmdbStore(tmp_path / "db", map_size=MAP, min_free_disk=0, writer="process")
    await s.open()
    assert isinstance(s._writer, ProcessCommitter) and s._writer._proc is not None
    proc = s._writer._proc
    await asyncio.gather(*(s.put(b"k%d" % i, b"v") for i in range(100)))
    await s.close()
    assert proc.returncode == 0  # it ended on its own, after the last commit
    again = LmdbStore(tmp_path / "db", map_size=MAP, min_free_disk=0)
    await again.open()
    try:
        assert len(await again.list_keys(b"k", 1000)) == 100
    finally:
        await again.close()


async def test_a_store_the_writer_cannot_open_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    await asyncio.to_thread(blocker.write_bytes, b"")
    committer = ProcessCommitter(
        {
            "path": str(blocker / "db"),
            "map_size": MAP,
            "fill_bytes": MAP,
            "min_free_disk": 0,
            "max_commit_ops": 100,
            "growth_prefixes": [],
            "added_prefixes": [],
            "version_tag": 0,
            "version_tags": 1,
        }
    )
    with pytest.raises(StorageUnavailable, match="cannot open the embedded store"):
        await committer.start()


@pytest.mark.slow
def test_the_writer_process_dies_with_its_node(tmp_path: Path) -> None:
    node = node_process(tmp_path, env={"DYNAQ_EMBEDDED_WRITER": "process"}).start()
    try:
        assert node.proc is not None
        pid = node.proc.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        writers = [
            int(c)
            for c in children
            if b"embedded_writer_child" in Path(f"/proc/{c}/cmdline").read_bytes()
        ]
        assert len(writers) == 1, children
    finally:
        node.kill()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{writers[0]}").exists():
        status = Path(f"/proc/{writers[0]}/status").read_text()
        if "zombie" in status:
            break
        assert time.monotonic() < deadline, "the writer process outlived its node"
        time.sleep(0.05)


async def test_a_data_dir_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    await asyncio.to_thread(blocker.write_bytes, b"")
    s = LmdbStore(blocker / "lmdb", map_size=MAP, min_free_disk=0)
    with pytest.raises(StorageUnavailable, match="cannot create the store's directory"):
        await s.open()
