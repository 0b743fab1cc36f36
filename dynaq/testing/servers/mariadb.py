"""Run a real, throwaway MariaDB server (Debian's packages) for benchmarks and tests.

The same shape as :mod:`dynaq.testing.servers.postgres`: :func:`start_mariadb`
runs ``mariadb-install-db`` into a fresh temp dir, starts ``mariadbd`` on a
free 127.0.0.1 port (its unix socket in that dir too) and waits until it
accepts TCP connections; :meth:`MariaDbServer.stop` shuts it down (SIGTERM,
a clean InnoDB shutdown) and removes the dir.

An init file creates the database :data:`DATABASE` and a password-less user
:data:`USER` allowed from anywhere, so clients connect over TCP as a JDBC
client would. When the harness runs as root the server runs as the ``mysql``
user the Debian package creates (``mariadbd --user=mysql``).

``durable=True`` (the default: the batches benchmark compares against fsync'd
LMDB commits) keeps InnoDB's defaults, a redo-log flush per commit;
``durable=False`` flushes once a second and drops the doublewrite buffer.

Where MariaDB is: ``/usr/sbin/mariadbd`` and ``mariadb-install-db`` on PATH
(what ``scripts/deps/mariadb.sh`` installs), or the directory named by
``DYNAQ_TESTING_MARIADB_BIN`` holding both.
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

BIN_ENV = "DYNAQ_TESTING_MARIADB_BIN"
USER = "dynaq"
DATABASE = "bench"


def _binaries() -> tuple[Path, Path] | None:
    """``(mariadbd, mariadb-install-db)``, or ``None`` when either is missing."""
    override = os.environ.get(BIN_ENV)
    if override:
        server, install = Path(override) / "mariadbd", Path(override) / "mariadb-install-db"
        return (server, install) if server.exists() and install.exists() else None
    server_path = next(
        (p for p in ("/usr/sbin/mariadbd", "/usr/sbin/mysqld") if Path(p).exists()),
        shutil.which("mariadbd"),
    )
    install_path = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
    if server_path is None or install_path is None:
        return None
    return Path(server_path), Path(install_path)


def available() -> str | None:
    """Why MariaDB cannot run here, or ``None`` if it can."""
    if _binaries() is None:
        return (
            f"no mariadbd + mariadb-install-db (nor ${BIN_ENV}); run scripts/deps/mariadb.sh"
            " (apt-get install mariadb-server)"
        )
    if os.geteuid() == 0:
        try:
            subprocess.run(["id", "mysql"], check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError):
            return "running as root and there is no 'mysql' user to run the server"
    return None


@dataclass
class MariaDbServer:
    """A running MariaDB server on 127.0.0.1."""

    port: int
    directory: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    host: str = "127.0.0.1"
    user: str = USER
    database: str = DATABASE

    @property
    def log_path(self) -> Path:
        """The server's error log."""
        return self.directory / "server.log"

    def log_tail(self, chars: int = 4000) -> str:
        """The last ``chars`` characters of :attr:`log_path`."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM (a clean shutdown), SIGKILL after 60 s, then remove the files."""
        try:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=10)
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def start_mariadb(*, durable: bool = True, timeout_s: float = 90.0) -> MariaDbServer:
    """mariadb-install-db + mariadbd on a free port; return once it accepts connections."""
    why = available()
    if why is not None:
        raise RuntimeError(f"MariaDB unavailable: {why}")
    binaries = _binaries()
    assert binaries is not None
    server_bin, install_bin = binaries
    directory = Path(tempfile.mkdtemp(prefix="dynaq-mariadb-"))
    as_root = os.geteuid() == 0
    if as_root:
        shutil.chown(directory, "mysql", "mysql")
    data = directory / "data"
    user_args = ["--user=mysql"] if as_root else []
    run = subprocess.run(
        [
            str(install_bin),
            "--no-defaults",
            f"--datadir={data}",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
            *user_args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if run.returncode != 0:
        shutil.rmtree(directory, ignore_errors=True)
        raise RuntimeError(f"mariadb-install-db failed:\n{run.stdout}\n{run.stderr}")
    init = directory / "init.sql"
    init.write_text(
        f"CREATE DATABASE IF NOT EXISTS `{DATABASE}`;\n"
        f"CREATE USER IF NOT EXISTS '{USER}'@'%';\n"
        f"GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'%';\n"
    )
    if as_root:
        shutil.chown(init, "mysql", "mysql")
    port = free_port()
    durability = [] if durable else ["--innodb-flush-log-at-trx-commit=2", "--innodb-doublewrite=0"]
    log = directory / "server.log"
    process = subprocess.Popen(
        [
            str(server_bin),
            "--no-defaults",
            f"--datadir={data}",
            f"--port={port}",
            "--bind-address=127.0.0.1",
            f"--socket={directory / 'mysqld.sock'}",
            f"--pid-file={directory / 'mysqld.pid'}",
            f"--log-error={log}",
            f"--init-file={init}",
            "--skip-name-resolve",
            "--max-connections=500",
            "--innodb-buffer-pool-size=256M",
            *durability,
            *user_args,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = MariaDbServer(port, directory, process)
    deadline = time.monotonic() + timeout_s
    while not _accepts(port):
        if process.poll() is not None or time.monotonic() > deadline:
            tail = server.log_tail()
            server.stop()
            raise RuntimeError(f"mariadbd did not start (exit {process.returncode}):\n{tail}")
        time.sleep(0.1)
    return server
