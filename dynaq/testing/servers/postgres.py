"""Run a real, throwaway PostgreSQL cluster (Debian's packages) for tests and benchmarks.

Shipped as code, like :mod:`dynaq.testing.servers.cassandra`: :func:`start_postgres`
runs ``initdb`` into a fresh temp dir and ``pg_ctl start`` on a free
127.0.0.1 port, with the unix socket in that dir too, and waits until the
server accepts connections. :meth:`PgServer.stop` stops it (fast shutdown)
and removes the dir.

PostgreSQL refuses to run as root, so when the harness runs as root the
cluster belongs to the ``postgres`` user the Debian package creates and every
server command goes through ``runuser``. The temp dir is made directly under
the system temp dir (pytest's own dirs are 0700 root-only, which ``postgres``
could not traverse).

``durable=False`` (the tests' default) turns ``fsync`` and synchronous commit
off: a test session's cluster is thrown away, so crash safety buys nothing
and costs seconds. The benchmark passes ``durable=True`` to measure what a
real deployment would see.

Where PostgreSQL is: the newest ``/usr/lib/postgresql/*/bin`` (Debian's
layout, what ``scripts/deps/postgresql.sh`` installs), or the directory named
by ``DYNAQ_TESTING_PG_BIN`` (it must hold ``initdb`` and ``pg_ctl``).
:func:`start_postgres` blocks; from async code use
:func:`dynaq.testing.run_postgres`.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dynaq.testing.process import free_port

SUPERUSER = "postgres"
PG_BIN_ENV = "DYNAQ_TESTING_PG_BIN"


def bin_dir() -> Path | None:
    """``$DYNAQ_TESTING_PG_BIN`` when set, else the newest installed PostgreSQL's
    bin dir (Debian layout), or ``None``."""
    override = os.environ.get(PG_BIN_ENV)
    if override:
        return Path(override) if (Path(override) / "pg_ctl").exists() else None
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parent.parent.name),
    )
    return Path(found[-1]).parent if found else None


def available() -> str | None:
    """Why PostgreSQL cannot run here, or ``None`` if it can."""
    if bin_dir() is None:
        return (
            f"no /usr/lib/postgresql/*/bin/pg_ctl nor ${PG_BIN_ENV}/pg_ctl"
            " (run scripts/deps/postgresql.sh)"
        )
    if os.geteuid() == 0:
        try:
            subprocess.run(["id", "postgres"], check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError):
            return "running as root and there is no 'postgres' user to run the server"
        if shutil.which("runuser") is None:
            return "running as root and runuser is missing"
    return None


def _as_owner(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


@dataclass
class PgServer:
    """A running PostgreSQL cluster on 127.0.0.1."""

    port: int
    directory: Path
    bin: Path

    @property
    def data_dir(self) -> Path:
        """The cluster's ``PGDATA``."""
        return self.directory / "data"

    @property
    def dsn(self) -> str:
        """A libpq/asyncpg DSN for the superuser's ``postgres`` database over TCP."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.directory / "server.log"

    def log_tail(self, chars: int = 4000) -> str:
        """The last ``chars`` characters of :attr:`log_path`."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Fast shutdown (rolls back open transactions), then remove the files."""
        try:
            subprocess.run(
                _as_owner(
                    [
                        str(self.bin / "pg_ctl"),
                        "stop",
                        "-D",
                        str(self.data_dir),
                        "-m",
                        "fast",
                        "-w",
                        "-t",
                        "30",
                    ]
                ),
                check=False,
                capture_output=True,
                timeout=60,
            )
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def start_postgres(*, durable: bool = False, max_connections: int = 100) -> PgServer:
    """initdb + pg_ctl start on a free port; return once it accepts connections."""
    why = available()
    if why is not None:
        raise RuntimeError(f"PostgreSQL unavailable: {why}")
    pg_bin = bin_dir()
    assert pg_bin is not None
    directory = Path(tempfile.mkdtemp(prefix="dynaq-pg-"))
    if os.geteuid() == 0:
        shutil.chown(directory, "postgres", "postgres")
    data = directory / "data"
    run = subprocess.run(
        _as_owner(
            [
                str(pg_bin / "initdb"),
                "-D",
                str(data),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--no-sync",
            ]
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if run.returncode != 0:
        shutil.rmtree(directory, ignore_errors=True)
        raise RuntimeError(f"initdb failed:\n{run.stdout}\n{run.stderr}")
    port = free_port()
    settings = {
        "listen_addresses": "'127.0.0.1'",
        "port": str(port),
        "unix_socket_directories": f"'{directory}'",
        "max_connections": str(max_connections),
        "shared_buffers": "'128MB'",
        "fsync": "on" if durable else "off",
        "synchronous_commit": "on" if durable else "off",
        "full_page_writes": "on" if durable else "off",
        "logging_collector": "off",
        "log_min_messages": "warning",
    }
    with open(data / "postgresql.auto.conf", "a") as f:
        for k, v in settings.items():
            f.write(f"{k} = {v}\n")
    server = PgServer(port, directory, pg_bin)
    run = subprocess.run(
        _as_owner(
            [
                str(pg_bin / "pg_ctl"),
                "start",
                "-D",
                str(data),
                "-l",
                str(server.log_path),
                "-w",
                "-t",
                "60",
            ]
        ),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    if run.returncode != 0:
        tail = server.log_tail()
        server.stop()
        raise RuntimeError(f"pg_ctl start failed:\n{run.stdout}\n{run.stderr}\n{tail}")
    return server
