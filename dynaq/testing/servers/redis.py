"""Run a real, throwaway ``redis-server`` (Debian's package) for benchmarks and tests.

The same shape as the other servers here: :func:`start_redis` starts
``redis-server`` on a free 127.0.0.1 port with its working dir in a fresh
temp dir and waits until it answers ``PING``; :meth:`RedisServer.stop` shuts
it down and removes the dir.

Redis is run as Carlyle's docker-compose runs it: in memory, no append-only
file; ``save ""`` additionally skips the background snapshots of a throwaway
server. ``durable=True`` turns the append-only file on with an fsync per write.

Where Redis is: ``redis-server`` on PATH (what ``scripts/deps/redis.sh``
installs), or the path named by ``DYNAQ_TESTING_REDIS_SERVER``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from dynaq.testing.process import free_port

SERVER_ENV = "DYNAQ_TESTING_REDIS_SERVER"


def server_path() -> Path | None:
    """The ``redis-server`` binary, or ``None``."""
    override = os.environ.get(SERVER_ENV)
    if override:
        return Path(override) if Path(override).exists() else None
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )
    return Path(found) if found else None


def available() -> str | None:
    """Why Redis cannot run here, or ``None`` if it can."""
    if server_path() is None:
        return (
            f"no redis-server on PATH (nor ${SERVER_ENV}); run scripts/deps/redis.sh"
            " (apt-get install redis-server)"
        )
    return None


@dataclass
class RedisServer:
    """A running ``redis-server`` on 127.0.0.1."""

    port: int
    directory: Path
    process: subprocess.Popen[bytes] = field(repr=False)
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        """A ``redis://`` URL for database 0."""
        return f"redis://{self.host}:{self.port}/0"

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.directory / "server.log"

    def stop(self) -> None:
        """SIGTERM, SIGKILL after 30 s, then remove the files."""
        try:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=10)
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def _pong(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def start_redis(*, durable: bool = False, timeout_s: float = 30.0) -> RedisServer:
    """``redis-server`` on a free port; return once it answers ``PING``."""
    binary = server_path()
    if binary is None:
        raise RuntimeError(f"Redis unavailable: {available()}")
    directory = Path(tempfile.mkdtemp(prefix="dynaq-redis-"))
    port = free_port()
    persistence = ["--appendonly", "yes", "--appendfsync", "always"] if durable else []
    process = subprocess.Popen(
        [
            str(binary),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(directory),
            "--logfile",
            str(directory / "server.log"),
            "--save",
            "",
            "--daemonize",
            "no",
            *persistence,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = RedisServer(port, directory, process)
    deadline = time.monotonic() + timeout_s
    while not _pong(port):
        if process.poll() is not None or time.monotonic() > deadline:
            try:
                tail = server.log_path.read_text(errors="replace")[-4000:]
            except OSError:
                tail = ""
            server.stop()
            raise RuntimeError(f"redis-server did not start (exit {process.returncode}):\n{tail}")
        time.sleep(0.05)
    return server
