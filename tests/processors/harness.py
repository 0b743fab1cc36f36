"""Real worker processes for the processor tests, and the reads the checkers need."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynaq.client import Client
from dynaq.testing.cluster import ClusterNode
from dynaq.testing.process import NodeProcess

ROOT = Path(__file__).resolve().parents[2]
LIVE: list[Worker] = []
"""Every worker a test started: the conftest kills what is left when the test ends."""


@dataclass
class Worker:
    """One ``dynaq worker tests.processors.apps:<app>`` process."""

    proc: subprocess.Popen[bytes]
    log_path: Path

    def wait(self, timeout_s: float) -> int | None:
        """Its exit code, or None if it still runs after ``timeout_s``."""
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def started(self) -> bool:
        try:
            return b'"worker started"' in self.log_path.read_bytes()
        except OSError:
            return False

    def terminate(self, timeout_s: float = 15.0) -> int:
        """SIGTERM once it has started (before, SIGTERM's default action would kill
        it: no graceful stop to test), and wait for it to exit."""
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None and not self.started() and time.monotonic() < deadline:
            time.sleep(0.02)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return ""


@dataclass
class Harness:
    """Starts workers of one app against one node (of a ring, or alone), with the
    test's stream prefix."""

    node: NodeProcess | ClusterNode
    app: str
    prefix: str
    tmp: Path
    env: dict[str, str] = field(default_factory=dict)
    lease_ttl_s: float = 1.0
    started: int = 0

    def command(self) -> list[str]:
        return [sys.executable, "-m", "dynaq", "worker", f"tests.processors.apps:{self.app}"]

    def start(self, fault: str | None = None, **env: str) -> Worker:
        full = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
        full.update(
            DYNAQ_ENDPOINT=self.node.url,
            CUES_T=self.prefix,
            CUES_DIR=str(self.tmp),
            DYNAQ_LOG_LEVEL="info",
            **self.env,
            **env,
        )
        if fault:
            full["DYNAQ_FAULT_POINT"] = fault
        self.started += 1
        log_path = self.tmp / f"worker-{self.started}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [*self.command(), "--lease-ttl", str(self.lease_ttl_s)],
                env=full,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        worker = Worker(proc, log_path)
        LIVE.append(worker)
        return worker


def entries(c: Client, stream: str) -> list[dict[str, Any]]:
    """Every entry of ``stream`` (in index order)."""
    out: list[dict[str, Any]] = []
    while True:
        got = c.read_stream(stream, len(out), 1000)
        if not got:
            return out
        out.extend(item["entry"] for item in got)


def wait_for(cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
