"""Start real dynaq node processes for tests and benchmarks.

Shipped as code (like nats-server's test harness): ``start_node()`` runs
``python -m dynaq server`` on a free 127.0.0.1 port with a fresh data dir and
waits until ``/health`` answers 200.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def stop_process(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM ``proc``, then SIGKILL it if it has not exited within ``grace_s``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


# Ports handed out by this process: never twice, even after they are freed.
_handed_out: set[int] = set()
# Below the kernel's ephemeral range (32768-60999 here): a port picked there
# can be taken by any outgoing connection between the check and the bind.
_PORT_RANGE = (20000, 32000)


def free_port() -> int:
    """A 127.0.0.1 port free for both TCP and UDP (gossip binds both), outside
    the ephemeral range, and not handed out before by this process."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(*_PORT_RANGE)
        if port in _handed_out:
            continue
        try:
            with socket.socket() as t, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                t.bind(("127.0.0.1", port))
                u.bind(("127.0.0.1", port))
        except OSError:
            continue
        _handed_out.add(port)
        return port
    raise RuntimeError("no free 127.0.0.1 port found in 1000 tries")


@dataclass
class NodeProcess:
    """A running ``dynaq server`` process."""

    name: str
    port: int
    data_dir: Path
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> NodeProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dynaq", "server"],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"node {self.name} exited at start:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"node {self.name} did not become healthy:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs (the crash test)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def terminate(self, timeout_s: float = 20.0) -> int:
        """SIGTERM and wait; return the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)


def node_process(
    tmp: Path,
    name: str = "dynaq-1",
    *,
    port: int | None = None,
    data_dir: Path | None = None,
    env: dict[str, str] | None = None,
) -> NodeProcess:
    """Describe (not start) a node process with its own port and data dir."""
    port = port or free_port()
    data_dir = data_dir or tmp / f"{name}-data"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
    full_env.update(
        {
            "DYNAQ_NODE_NAME": name,
            "DYNAQ_HTTP_PORT": str(port),
            "DYNAQ_HTTP_HOST": "127.0.0.1",
            "DYNAQ_DATA_DIR": str(data_dir),
            "DYNAQ_LOG_LEVEL": "info",
            "DYNAQ_STATS_TYPE": "none",
            "PYTHONUNBUFFERED": "1",
        }
    )
    full_env.update(env or {})
    return NodeProcess(name, port, data_dir, full_env, tmp / f"{name}.log")
