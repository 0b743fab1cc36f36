"""kill_tree: a node's whole process tree is gone, sockets closed, when it returns."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from dynaq.testing.process_tree import descendants, gone, kill_tree

# A parent whose child listens on a port from a second thread while its main thread
# sleeps: the shape of a node of workers (supervisor, multi-threaded workers).
_CHILD = """
import socket, sys, threading, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
threading.Thread(target=lambda: time.sleep(600), daemon=True).start()
time.sleep(600)
"""
_PARENT = f"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", {_CHILD!r}], stdout=sys.stdout)
time.sleep(600)
"""


def test_every_process_of_the_tree_is_gone_and_its_port_refuses() -> None:
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        port = int(parent.stdout.readline())
        deadline = time.monotonic() + 10
        while not descendants(parent.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        (child,) = descendants(parent.pid)
        assert not gone(child)

        kill_tree(parent.pid)

        assert gone(child)
        assert parent.wait(10) == -9
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        if parent.stdout is not None:
            parent.stdout.close()


def test_a_pid_that_does_not_exist_is_gone() -> None:
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())
    assert gone(pid_max + 1)
    assert descendants(pid_max + 1) == []
