"""A node process claims its data directory and its port before serving: a second
process on either exits 1 with one line naming what is taken, and the first one
keeps serving. ``kill -9`` of the holder frees the directory at once."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from dynaq.errors import CannotStart
from dynaq.node.claims import DataDirLock
from dynaq.testing.process import node_process


def _run_second(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dynaq", "server"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def _enqueue_and_count(url: str, *, create: bool = True) -> int:
    if create:
        req = urllib.request.Request(url + "/v1/queues/q", method="PUT", data=b"")
        urllib.request.urlopen(req, timeout=10).close()
    msg = urllib.request.Request(url + "/v1/queues/q/message", method="PUT", data=b"x")
    urllib.request.urlopen(msg, timeout=10).close()
    with urllib.request.urlopen(url + "/v2/queues/q", timeout=10) as r:
        return int(json.loads(r.read())["depth"])


def test_a_second_process_on_the_same_data_dir_refuses_to_start(tmp_path: Path) -> None:
    first = node_process(tmp_path, "first").start()
    try:
        second = node_process(tmp_path, "second", data_dir=first.data_dir)
        out = _run_second(second.env)
        assert out.returncode == 1, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
        assert "is in use by another dynaq process" in lines[0]
        assert first.proc is not None and f"pid {first.proc.pid}" in lines[0]
        # The first one kept the directory to itself, and serves as before.
        assert _enqueue_and_count(first.url) == 1
        first.kill()  # the kernel drops the lock with its holder: nothing stale to clear
        again = node_process(tmp_path, "again", data_dir=first.data_dir).start()
        try:
            assert _enqueue_and_count(again.url, create=False) == 2
        finally:
            again.terminate()
    finally:
        first.kill()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_taken_port_is_one_line_not_a_traceback(tmp_path: Path, workers: str) -> None:
    """Also between two nodes of several workers: both would bind the port with
    ``SO_REUSEPORT``, and the kernel would spread clients over the two nodes."""
    env = {"DYNAQ_HTTP_WORKERS": workers}
    first = node_process(tmp_path, "first", env=env).start()
    try:
        second = node_process(tmp_path, "second", port=first.port, env=env)
        out = _run_second(second.env)
        assert out.returncode == 1, out.stderr
        assert "Traceback" not in out.stderr, out.stderr
        errors = [line for line in out.stderr.splitlines() if line.startswith("dynaq: ")]
        assert errors == [errors[0]] and f"cannot listen on 127.0.0.1:{first.port}" in errors[0]
        assert "address already in use" in errors[0]
        assert _enqueue_and_count(first.url) == 1
    finally:
        first.kill()


def test_the_lock_names_an_unusable_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(CannotStart, match="cannot lock data directory"):
        DataDirLock(blocker / "data").acquire()
    with DataDirLock(tmp_path / "ok") as held:
        assert (tmp_path / "ok" / "LOCK").read_text().strip().isdigit()
    held.release()  # twice is harmless
