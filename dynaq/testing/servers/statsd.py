"""Run the real statsd daemon (npm ``statsd``) and read what it received.

The daemon's management port answers ``counters`` and ``gauges`` with the
values accumulated since its last flush; the flush interval is set to an hour
so nothing is flushed during a test.

Where the daemon is: ``scripts/deps/statsd.sh`` installs it under
``<checkout>/.cache/statsd``; installed from a wheel, set
``DYNAQ_TESTING_CACHE_DIR`` to a directory holding ``statsd/`` (see
:func:`dynaq.testing.process.cache_dir`). ``node`` must be on ``PATH``.
:func:`start_statsd` blocks; from async code use :func:`dynaq.testing.run_statsd`.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from dynaq.testing.process import CACHE_DIR_ENV, cache_dir, free_port

_VALUE = re.compile(r"'([^']+)': (-?[\d.e+]+)")


def stats_js() -> Path:
    """The daemon's entry point inside :func:`cache_dir`."""
    return cache_dir() / "statsd" / "node_modules" / "statsd" / "stats.js"


@dataclass
class StatsdServer:
    """A running statsd daemon: metrics in on UDP, read back on its management port."""

    udp_port: int
    mgmt_port: int
    proc: subprocess.Popen[bytes]

    @property
    def address(self) -> str:
        """``host:port`` of the UDP listener, as dynaq's ``[stats] address`` spells it."""
        return f"127.0.0.1:{self.udp_port}"

    def _command(self, cmd: str) -> str:
        with socket.create_connection(("127.0.0.1", self.mgmt_port), timeout=5) as s:
            s.sendall(cmd.encode() + b"\n")
            data = b""
            while b"END" not in data:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        return data.decode()

    def counters(self) -> dict[str, float]:
        """Counter values received since the last flush (blocking TCP round trip)."""
        return {k: float(v) for k, v in _VALUE.findall(self._command("counters"))}

    def gauges(self) -> dict[str, float]:
        """Gauge values received since the last flush (blocking TCP round trip)."""
        return {k: float(v) for k, v in _VALUE.findall(self._command("gauges"))}

    def stop(self) -> None:
        """SIGTERM and wait for the exit."""
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def available() -> str | None:
    """``None`` if the daemon can run here, else why not."""
    if shutil.which("node") is None:
        return "node is not installed"
    script = stats_js()
    if not script.exists():
        return (
            f"statsd is not installed ({script}); run scripts/deps/statsd.sh or set {CACHE_DIR_ENV}"
        )
    return None


def start_statsd(tmp: Path) -> StatsdServer:
    """Start the daemon on free 127.0.0.1 ports, its config and log in ``tmp``;
    return once its management port answers (``RuntimeError`` after 20 s)."""
    udp, mgmt = free_port(), free_port()
    config = tmp / "statsd-config.js"
    config.write_text(
        f"{{ port: {udp}, address: '127.0.0.1', mgmt_port: {mgmt}, mgmt_address: '127.0.0.1',"
        " flushInterval: 3600000, backends: [], deleteIdleStats: false }"
    )
    log = open(tmp / "statsd.log", "wb")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(
        ["node", str(stats_js()), str(config)], stdout=log, stderr=subprocess.STDOUT, env=os.environ
    )
    log.close()
    server = StatsdServer(udp, mgmt, proc)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError((tmp / "statsd.log").read_text())
        try:
            server.counters()
            return server
        except OSError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError("statsd did not start")
