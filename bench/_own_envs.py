"""N independent dynaq processes on one port, each on an LMDB environment of its own:
the upper bound of per-worker environments for ``python -m bench queue --workers N
--layout own``.

``python -m bench._own_envs N PORT DATA_DIR`` starts N ``dynaq server`` processes,
each a worker role of a ring of one (``SO_REUSEPORT`` on PORT, its own data dir
``DATA_DIR/w<i>``), and stops them on SIGTERM. No ring joins them: a worker
serves only its own environment's messages, so a consumer whose connection
lands on a drained worker finds nothing while another still holds messages.
That is what a real design of per-worker environments must solve; without it
these figures bound from above what no shared write lock can give, they are
not a configuration of dynaq.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from dynaq.node.workers import ROLE_ENV, WorkerRole
from dynaq.testing.cluster import http_get
from dynaq.testing.process import free_port, launch_cwd


class OwnEnvs:
    """The launcher's side: starts ``python -m bench._own_envs`` and waits until each
    of its N processes answers on the shared port (as :class:`NodeProcess` is used)."""

    def __init__(self, tmp: Path, n: int, env: dict[str, str]) -> None:
        self.port = free_port()
        self.data_dir = tmp / "own-envs"
        self.log_path = tmp / "own-envs.log"
        full = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
        full.update({"DYNAQ_STATS_TYPE": "none", "DYNAQ_LOG_LEVEL": "warning"})
        full.update({"DYNAQ_HTTP_HOST": "127.0.0.1", "PYTHONUNBUFFERED": "1", **env})
        full.pop("DYNAQ_HTTP_WORKERS", None)
        root = Path(__file__).resolve().parent.parent
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench._own_envs",
                    str(n),
                    str(self.port),
                    str(self.data_dir),
                ],
                env=full,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=root,
            )
        try:
            self._wait(n)
        except BaseException:
            self.kill()  # never leave the processes running behind a failed start
            raise

    def _wait(self, n: int) -> None:
        deadline = time.monotonic() + 60
        want = {f"own{i}-w0" for i in range(n)}
        seen: set[str] = set()
        while seen != want:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"own-environment workers did not start:\n{self.log()}")
            try:
                code, body = http_get(f"{self.url}/health", 1.0)
            except OSError:  # nothing listens yet
                code, body = 0, b""
            if code == 200:
                seen.add(json.loads(body)["node"])
            else:
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def worker_urls(self) -> list[str]:
        """Each process's own address (its private port serves the whole API): a queue
        must be created in each environment."""
        ports = json.loads((self.data_dir / "ports.json").read_text())
        return [f"http://127.0.0.1:{p}" for p in ports]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def terminate(self) -> int:
        self.proc.terminate()
        return self.proc.wait(60)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def main(n: int, port: int, data: Path) -> int:
    hold = socket.socket()
    hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    hold.bind(("127.0.0.1", port))
    procs = []
    peers = [free_port() for _ in range(n)]
    data.mkdir(parents=True, exist_ok=True)
    (data / "ports.json").write_text(json.dumps(peers))
    for i in range(n):
        role = WorkerRole(0, (free_port(),), (peers[i],), port, secrets.token_hex(8), os.getpid())
        env = {
            **os.environ,
            ROLE_ENV: role.encode(),
            "DYNAQ_DATA_DIR": str(data / f"w{i}"),
            "DYNAQ_NODE_NAME": f"own{i}",
        }
        procs.append(
            subprocess.Popen([sys.executable, "-m", "dynaq", "server"], env=env, cwd=launch_cwd())
        )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.wait(0.2):
        if any(p.poll() is not None for p in procs):
            break
    for p in procs:
        if p.poll() is None:
            p.terminate()
    codes = [p.wait(60) for p in procs]
    hold.close()
    return max(codes)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])))
