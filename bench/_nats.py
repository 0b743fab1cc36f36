"""A real NATS JetStream server for the same-run yardsticks (``bench queue``,
``bench streams``): ``nats-server -js`` on 127.0.0.1 with file storage in a temp dir."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from bench._queue_clients import DURABLE, STREAM, SUBJECT
from bench.common import Deadline, free_port
from dynaq.testing.process import stop_process


class NatsServer:
    """A real ``nats-server -js`` on 127.0.0.1, file storage in a temp dir."""

    def __init__(self, tmp: Path) -> None:
        exe = shutil.which("nats-server") or "/usr/sbin/nats-server"
        if not Path(exe).exists():
            raise RuntimeError("nats-server not found: run scripts/deps/nats.sh")
        self.port = free_port()
        store = tmp / "jetstream"
        store.mkdir()
        self.log_path = tmp / "nats.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [exe, "-js", "-sd", str(store), "-a", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = Deadline(15.0)
        while not deadline.expired():
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server exited:\n{self.log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("nats-server did not start listening")

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        stop_process(self.proc)


async def setup_nats(url: str) -> None:
    """The queue bench's stream and durable pull consumer."""
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name=STREAM, subjects=[SUBJECT], storage=StorageType.FILE))
        await js.add_consumer(
            STREAM,
            ConsumerConfig(
                durable_name=DURABLE,
                ack_policy=AckPolicy.EXPLICIT,
                max_ack_pending=-1,
                max_waiting=1024,
                ack_wait=60.0,
            ),
        )
    finally:
        await nc.close()
