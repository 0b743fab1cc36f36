"""The supervisor of a node of several workers (see :mod:`dynaq.node.workers`).

It serves no request: it picks the workers' loopback ports
and the secret of their ring (new ports for a worker that exits soon after its
start, in case another program took one), starts each worker as ``python -m dynaq
server`` with its role in ``DYNAQ_WORKER_ROLE``, starts again a worker that
exits (kill -9 of one worker: the others serve its lanes meanwhile, and it
rejoins under the same name and addresses), and on SIGTERM or SIGINT stops every
worker gracefully (SIGTERM each, SIGKILL what has not exited after
``http.shutdown_timeout_s`` + 30 s). Workers die with the supervisor (Linux
``PR_SET_PDEATHSIG``, set by each worker at start), so a kill -9 of the
supervisor is a crash of the whole node, never orphans holding the port.

With ``embedded.writer = "process"`` it also runs the store's writer process that
all the workers commit through (:mod:`dynaq.storage.embedded_writer_host`): it
starts it before the workers, starts it again when it dies, and ends it after
the workers have stopped, so their last writes commit.

The supervisor holds an unlistened ``SO_REUSEPORT`` socket on the public port
for its lifetime: the port is known (also when ``http.port = 0``), and no program
that does not ask for ``SO_REUSEPORT`` (as its own user) can take it meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import signal
import socket
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dynaq.clock import Clock, SystemClock
from dynaq.config import Config
from dynaq.errors import CannotStart
from dynaq.node.builders import build_store
from dynaq.node.workers import ROLE_ENV, WorkerRole, worker_count, worker_name
from dynaq.stop_signals import ignore_signals_once_stopped, stop_on_signals
from dynaq.tasks import cancel_all

if TYPE_CHECKING:
    from dynaq.storage.embedded_writer_host import SharedWriter

log = logging.getLogger(__name__)

_QUICK_EXIT_S = 5.0
"""A worker that exits sooner than this after its start is started again only
after a pause (doubling up to :data:`_MAX_PAUSE_S`): a worker that cannot start
must not spin."""
_MAX_PAUSE_S = 10.0
_KILL_AFTER_EXTRA_S = 30.0


# Below the kernel's usual ephemeral range (32768-60999): a port picked there can
# be taken by an outgoing connection between the check and the worker's bind.
_PORT_RANGE = (20000, 32000)


def _loopback_port() -> int:
    """A 127.0.0.1 port free for TCP and UDP now (a worker's gossip binds both)."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(*_PORT_RANGE)
        if _free_now(port):
            return port
    raise OSError("no free 127.0.0.1 port for a worker")


def _free_now(port: int) -> bool:
    """Whether a worker could bind 127.0.0.1:``port`` for TCP and UDP now (as its
    server does, past the connections a worker that died left in TIME_WAIT)."""
    try:
        with socket.socket() as t, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            t.bind(("127.0.0.1", port))
            u.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True


def _hold_public_port(host: str, port: int) -> socket.socket:
    """Bind (not listen) ``host:port`` with ``SO_REUSEPORT``; the socket's port is the
    node's. :class:`CannotStart` if anything holds it: a port held with
    ``SO_REUSEPORT`` (another node of several workers, by this user) would take the
    bind below, and the kernel would then spread clients over two nodes; a plain
    bind first refuses every holder."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    addr = (host or "0.0.0.0", port)
    try:
        if port:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(addr)
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(addr)
        except OSError:
            sock.close()
            raise
    except OSError as exc:
        why = str(exc.strerror or exc).lower()  # as a node of one process says it
        raise CannotStart(f"cannot listen on {host}:{port}: {why}") from None
    return sock


class Supervisor:
    """Runs and restarts the worker processes of one node until told to stop."""

    def __init__(
        self,
        config: Config,
        argv: Sequence[str],
        *,
        clock: Clock | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.config = config
        self.count = worker_count(config)
        self._argv = list(argv)
        self._clock = clock or SystemClock()
        self._env = dict(os.environ if env is None else env)
        self._procs: dict[int, asyncio.subprocess.Process] = {}
        self.stopping = asyncio.Event()
        self.starts = [0] * self.count
        """How many times each worker was started (a restart counts)."""
        self._port_socket: socket.socket | None = None
        self._public = 0
        self._key = secrets.token_hex(16)
        self._gossip_ports: list[int] = []
        self._peer_ports: list[int] = []
        self.writer = _shared_writer(config)
        """The store writer process the workers share (``None``: each has its own)."""

    def pids(self) -> dict[int, int]:
        """The running workers' process ids, by index."""
        return {i: p.pid for i, p in self._procs.items() if p.returncode is None}

    async def run(self) -> None:
        """Start every worker and keep them running until :attr:`stopping` is set;
        then stop them all and return."""
        h = self.config.http
        self._port_socket = _hold_public_port(h.host, h.port)
        self._public = public = int(self._port_socket.getsockname()[1])
        self._gossip_ports = [_loopback_port() for _ in range(self.count)]
        self._peer_ports = [_loopback_port() for _ in range(self.count)]
        if self.writer is not None:
            await self.writer.start()
        log.info("node supervisor starting workers", extra={"workers": self.count, "port": public})
        keepers = [
            asyncio.create_task(self._keep(i), name=f"worker-{i}") for i in range(self.count)
        ]
        try:
            await self.stopping.wait()
            await self._stop_all()
        finally:
            await cancel_all(keepers)
            for proc in self._procs.values():
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            if self.writer is not None:
                await self.writer.stop()
            self._port_socket.close()
        log.info("node supervisor stopped")

    async def _spawn(self, index: int) -> asyncio.subprocess.Process:
        role = WorkerRole(
            index,
            tuple(self._gossip_ports),
            tuple(self._peer_ports),
            self._public,
            self._key,
            os.getpid(),
            "" if self.writer is None else self.writer.address,
        )
        env = {**self._env, ROLE_ENV: role.encode()}
        # A process group of its own: a Ctrl-C in the terminal reaches the supervisor
        # alone, which stops the workers in turn (see _stop_all).
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dynaq", *self._argv, env=env, process_group=0
        )
        self._procs[index] = proc
        self.starts[index] += 1
        name = worker_name(self.config.node.name, index)
        log.info("worker started", extra={"worker": name, "pid": proc.pid})
        return proc

    async def _keep(self, index: int) -> None:
        """Run worker ``index``, starting it again whenever it exits before the stop."""
        pause = 1.0
        name = worker_name(self.config.node.name, index)
        while not self.stopping.is_set():
            started = self._clock.monotonic()
            proc = await self._spawn(index)
            code = await proc.wait()
            if self.stopping.is_set():
                return
            lived = self._clock.monotonic() - started
            log.warning(
                "worker exited; starting it again",
                extra={"worker": name, "code": code, "lived_s": round(lived, 1)},
            )
            if lived < _QUICK_EXIT_S:
                # Perhaps another program took one of its ports: a new one for a port
                # taken now. Only then: the others learn a new address from gossip,
                # but hold the dead one under its name for about half a minute, and
                # meanwhile do not see the worker back (its streams answer 503).
                for ports in (self._gossip_ports, self._peer_ports):
                    if not _free_now(ports[index]):
                        ports[index] = _loopback_port()
                await self._clock.sleep(pause)
                pause = min(pause * 2, _MAX_PAUSE_S)
            else:
                pause = 1.0

    async def _stop_all(self) -> None:
        """SIGTERM the workers one after another, each once the one before has exited:
        each hands its in-flight messages to those still running, and the last one,
        alone, parks them all in the store for the next start (stopped together, each
        would hand over to workers that are leaving too, and the next start would serve
        every message in flight again at once). SIGKILL what has not exited in time."""
        running = [p for p in self._procs.values() if p.returncode is None]
        limit = self.config.http.shutdown_timeout_s + _KILL_AFTER_EXTRA_S
        try:
            async with asyncio.timeout(limit):
                for proc in running:
                    with contextlib.suppress(ProcessLookupError):
                        proc.send_signal(signal.SIGTERM)
                    await proc.wait()
        except TimeoutError:
            log.warning("workers did not stop in time; killing them", extra={"after_s": limit})
            for proc in running:
                if proc.returncode is None:
                    proc.kill()
            await asyncio.gather(*(p.wait() for p in running))


def _shared_writer(config: Config) -> SharedWriter | None:
    """The writer process for the workers' store, when they commit through one."""
    if config.storage.backend != "embedded" or config.embedded.writer != "process":
        return None
    # Imported only when chosen, as every backend is.
    from dynaq.storage.embedded import LmdbStore
    from dynaq.storage.embedded_writer_host import SharedWriter

    store = build_store(config, count_messages=True)  # a node of several workers
    assert isinstance(store, LmdbStore)
    return SharedWriter(store.shared_writer_options())


def die_with_parent(parent: int) -> None:
    """In a worker: be killed when the supervisor (process ``parent``) dies (Linux),
    and exit at once if it is already gone."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if parent and os.getppid() != parent:
        raise SystemExit("dynaq worker: its supervisor is gone")


async def run_supervisor(config: Config, argv: Sequence[str]) -> None:
    """Run a node of several workers until SIGTERM or SIGINT."""
    sup = Supervisor(config, argv)
    loop = asyncio.get_running_loop()
    stop_on_signals(loop, sup.stopping.set)
    try:
        await sup.run()
    finally:
        ignore_signals_once_stopped(loop)
