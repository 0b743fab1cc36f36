"""Async context managers that run real dynaq nodes, clusters and servers, and wait until ready.

Each ``run_*`` starts real processes on free 127.0.0.1 ports, returns once they
answer, and tears them down when the ``async with`` block ends, also on an
error or a cancellation. The waits are the synchronous harness's
(:mod:`dynaq.testing.process`, :mod:`dynaq.testing.cluster`,
:mod:`dynaq.testing.servers`), run in a worker thread with
:func:`asyncio.to_thread`, so the event loop is never blocked.

A start cannot be interrupted half-way: when the awaiting task is cancelled
during one, the context manager waits for the start to end (at most its
``timeout_s``), stops whatever it started, and then re-raises the cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import tempfile
import typing
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal, TypeVar

from dynaq.errors import ServerUnavailable
from dynaq.testing.cluster import ClusterNode, LocalCluster
from dynaq.testing.process import NodeProcess, free_port, node_process, stop_process
from dynaq.testing.servers import cassandra, postgres, statsd

SettingValue = str | int | float | bool | Sequence[str]
"""A value for one node setting: lists are joined with commas, booleans are ``true``/``false``."""

_T = TypeVar("_T")


def settings_env(settings: Mapping[str, SettingValue]) -> dict[str, str]:
    """The ``DYNAQ_*`` environment that sets each ``<section>_<key>`` of ``settings``.

    ``{"queues_visibility_timeout_s": 5}`` becomes
    ``{"DYNAQ_QUEUES_VISIBILITY_TIMEOUT_S": "5"}``. A name that is no setting of
    :class:`dynaq.config.Config` raises ``TypeError`` here: the node itself
    would silently ignore an unknown variable.
    """
    if not settings:
        return {}
    from dynaq.config import Config  # only when settings are given: keeps import light

    sections = typing.get_type_hints(Config)
    env: dict[str, str] = {}
    for name, value in settings.items():
        section, _, key = name.partition("_")
        fields = (
            {f.name for f in dataclasses.fields(sections[section])} if section in sections else ()
        )
        if key not in fields:
            raise TypeError(f"{name!r} is not a dynaq setting (<section>_<key>, e.g. http_port)")
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str | int | float):
            text = str(value)
        else:
            text = ",".join(value)
        env[f"DYNAQ_{name.upper()}"] = text
    return env


async def _start_in_thread(start: Callable[[], _T], stop: Callable[[_T], object]) -> _T:
    """Run the blocking ``start`` in a worker thread and return what it started.

    If the awaiting task is cancelled meanwhile, wait for ``start`` to end
    (a thread cannot be interrupted), ``stop`` its result, and re-raise.
    """
    job = asyncio.ensure_future(asyncio.to_thread(start))
    try:
        return await asyncio.shield(job)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            started = await job
            await asyncio.to_thread(stop, started)
        raise


@contextlib.asynccontextmanager
async def _directory(given: Path | str | None, prefix: str) -> AsyncIterator[Path]:
    """``given`` (kept afterwards), or a fresh temporary directory (removed afterwards).

    The file system is touched in a worker thread: it can block on a slow disk.
    """
    if given is not None:
        path = Path(given)
        await asyncio.to_thread(path.mkdir, parents=True, exist_ok=True)
        yield path
        return
    path = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix=prefix))
    try:
        yield path
    finally:
        await asyncio.to_thread(shutil.rmtree, path, ignore_errors=True)


class NodeServer:
    """A running ``dynaq server`` process started by :func:`run_node`.

    The blocking :class:`~dynaq.testing.process.NodeProcess` underneath is
    :attr:`process`; every method here runs its waits in a worker thread.
    """

    def __init__(self, process: NodeProcess) -> None:
        self.process = process

    @property
    def name(self) -> str:
        """The node's name (``[node] name``)."""
        return self.process.name

    @property
    def port(self) -> int:
        """The HTTP port on 127.0.0.1."""
        return self.process.port

    @property
    def url(self) -> str:
        """The base URL, ``http://127.0.0.1:<port>``."""
        return self.process.url

    @property
    def data_dir(self) -> Path:
        """The node's data directory (it survives :meth:`kill` and :meth:`restart`)."""
        return self.process.data_dir

    def alive(self) -> bool:
        """Whether the process is running."""
        return self.process.alive()

    def log(self) -> str:
        """The tail of the node's combined stdout and stderr."""
        return self.process.log()

    async def start(self, timeout_s: float = 30.0) -> None:
        """Start the (stopped) process again on the same port and data dir; return
        once ``/health`` answers 200 (``RuntimeError`` with the log's tail if not)."""
        await _start_in_thread(lambda: self.process.start(timeout_s), NodeProcess.kill)

    async def kill(self) -> None:
        """SIGKILL: no shutdown code runs (what a crash looks like to the cluster)."""
        await asyncio.to_thread(self.process.kill)

    async def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM (graceful: drain, leave the ring) and wait; return the exit code."""
        if self.process.proc is None:
            raise RuntimeError(f"node {self.name} was never started")
        return await asyncio.to_thread(self.process.terminate, timeout_s)

    async def restart(self, timeout_s: float = 30.0) -> None:
        """:meth:`stop` if running, then :meth:`start` on the same port and data dir."""
        if self.alive():
            await self.stop()
        await self.start(timeout_s)


@contextlib.asynccontextmanager
async def run_node(
    *,
    name: str = "dynaq-1",
    port: int = 0,
    directory: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    **settings: SettingValue,
) -> AsyncIterator[NodeServer]:
    """Run one real ``dynaq server`` process on 127.0.0.1 until the block ends.

    ``port=0`` picks a free port (:func:`~dynaq.testing.process.free_port`).
    ``directory`` holds the node's data dir and log; by default a temporary
    directory, removed afterwards. ``settings`` are node settings named
    ``<section>_<key>`` (``queues_visibility_timeout_s=5``, ``stats_type="statsd"``;
    see :func:`settings_env`) and ``env`` adds raw environment variables. The
    node logs at ``info``, sends no metrics (``stats_type="none"``) and runs on
    the embedded store unless told otherwise.

    Yields once ``/health`` answers 200. On exit the node gets SIGTERM, and
    SIGKILL if it has not exited within 10 s.
    """
    extra = {**settings_env(settings), **(env or {})}
    async with _directory(directory, "dynaq-node-") as tmp:
        process = node_process(tmp, name, port=port or None, env=extra)
        node = NodeServer(process)
        await _start_in_thread(lambda: process.start(timeout_s), NodeProcess.kill)
        try:
            yield node
        finally:
            if process.proc is not None:
                await asyncio.to_thread(stop_process, process.proc, 10.0)


class Cluster:
    """A running ring of dynaq node processes started by :func:`run_cluster`.

    The blocking :class:`~dynaq.testing.cluster.LocalCluster` underneath is
    :attr:`local`; every method here runs its waits in a worker thread.
    """

    def __init__(self, local: LocalCluster) -> None:
        self.local = local

    @property
    def nodes(self) -> list[ClusterNode]:
        """Every node, running or not, in start order (``dynaq-1``, ``dynaq-2``, ...)."""
        return self.local.nodes

    @property
    def urls(self) -> list[str]:
        """Base URLs of the running nodes."""
        return self.local.urls

    def node(self, name: str) -> ClusterNode:
        """The node called ``name``."""
        return self.local.node(name)

    async def kill(self, name: str) -> None:
        """SIGKILL one node: it leaves no word, its peers must detect the failure."""
        await asyncio.to_thread(self.node(name).kill)

    async def stop(self, name: str, timeout_s: float = 20.0) -> int:
        """SIGTERM one node (graceful leave and drain); return its exit code."""
        return await asyncio.to_thread(self.node(name).terminate, timeout_s)

    async def start(self, name: str, timeout_s: float = 30.0) -> None:
        """Start a stopped or killed node again; return once it is healthy
        (wait for the ring with :meth:`wait_converged`)."""
        node = self.node(name)
        await _start_in_thread(
            lambda: self.local.start_node(node, timeout_s), lambda _: node.kill()
        )

    async def wait_converged(
        self, names: Sequence[str] | None = None, timeout_s: float = 30.0
    ) -> float:
        """Wait until every running node lists exactly ``names`` (default: the
        running nodes) as the ring; return the seconds it took."""
        want = list(names) if names is not None else [n.name for n in self.nodes if n.alive()]
        return await asyncio.to_thread(self.local.wait_converged, want, timeout_s)


@contextlib.asynccontextmanager
async def run_cluster(
    size: int = 3,
    storage: Literal["embedded", "cassandra", "riak"] = "embedded",
    *,
    cassandra_hosts: Sequence[str] | None = None,
    riak_http: Sequence[str] = (),
    keyspace: str = "dynaq",
    directory: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 60.0,
    **settings: SettingValue,
) -> AsyncIterator[Cluster]:
    """Run ``size`` real node processes as one gossip ring on 127.0.0.1.

    ``storage="embedded"`` gives each node its own LMDB (membership, slices
    and rejoin work; messages stay on the node that took them).
    ``storage="cassandra"`` puts every node on one keyspace, as a real
    cluster runs: on ``cassandra_hosts`` (``host:port``), or, when none are
    given, on a throwaway Cassandra started with :func:`run_cassandra` for
    the cluster's lifetime. ``storage="riak"`` puts every node on the Riak
    whose HTTP listeners are ``riak_http``, buckets prefixed ``keyspace``
    (start one with :mod:`dynaq.testing.servers.riak`). ``settings`` and ``env`` apply to every node, as
    in :func:`run_node`.

    Yields once every node answers ``/health`` and lists every other node in
    its ring. On exit every node gets SIGTERM (SIGKILL after 20 s).
    """
    extra = {**settings_env(settings), **(env or {})}
    async with contextlib.AsyncExitStack() as stack:
        tmp = await stack.enter_async_context(_directory(directory, "dynaq-cluster-"))
        hosts: list[str] = []
        if storage == "cassandra":
            if cassandra_hosts is None:
                server = await stack.enter_async_context(run_cassandra(tmp / "cassandra"))
                cassandra_hosts = [server.host]
            hosts = list(cassandra_hosts)
        local = LocalCluster(
            tmp,
            size=size,
            backend=storage,
            cassandra_hosts=hosts,
            riak_http=list(riak_http),
            keyspace=keyspace,
            env=extra,
        )
        await _start_in_thread(lambda: local.start(timeout_s), LocalCluster.stop)
        try:
            yield Cluster(local)
        finally:
            await asyncio.to_thread(local.stop)


@contextlib.asynccontextmanager
async def run_cassandra(
    directory: Path | str | None = None, timeout_s: float = 120.0
) -> AsyncIterator[cassandra.CassandraServer]:
    """Run a single-node Cassandra 2.1 on free 127.0.0.1 ports until the block ends.

    Yields once a CQL query answers; connect to ``server.host``. Its files go
    to ``directory`` (default: a temporary directory, removed afterwards).
    Raises :class:`ServerUnavailable` when Java, Cassandra or
    ``cassandra-driver`` is missing (``scripts/deps/cassandra.sh``).
    """
    why = await asyncio.to_thread(cassandra.available)  # looks at the file system
    if why is not None:
        raise ServerUnavailable(f"Cassandra unavailable: {why}")
    async with _directory(directory, "dynaq-cassandra-") as tmp:
        server = await _start_in_thread(
            lambda: cassandra.start_cassandra(tmp, timeout_s), cassandra.CassandraServer.stop
        )
        try:
            yield server
        finally:
            await asyncio.to_thread(server.stop)


@contextlib.asynccontextmanager
async def run_postgres(
    *, durable: bool = False, max_connections: int = 100
) -> AsyncIterator[postgres.PgServer]:
    """Run a throwaway PostgreSQL cluster on a free 127.0.0.1 port until the block ends.

    Yields once it accepts connections; connect with ``server.dsn``.
    ``durable=False`` turns fsync off (fast, not crash-safe). Raises
    :class:`ServerUnavailable` when PostgreSQL is missing
    (``scripts/deps/postgresql.sh``).
    """
    why = await asyncio.to_thread(postgres.available)  # looks at the file system
    if why is not None:
        raise ServerUnavailable(f"PostgreSQL unavailable: {why}")
    server = await _start_in_thread(
        lambda: postgres.start_postgres(durable=durable, max_connections=max_connections),
        postgres.PgServer.stop,
    )
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)


@contextlib.asynccontextmanager
async def run_statsd(directory: Path | str | None = None) -> AsyncIterator[statsd.StatsdServer]:
    """Run the statsd daemon on free 127.0.0.1 ports until the block ends.

    Yields once its management port answers; point a node at it with
    ``stats_type="statsd", stats_address=server.address``. Reading values
    back (``server.counters()``) blocks: call it with :func:`asyncio.to_thread`.
    Raises :class:`ServerUnavailable` when ``node`` or the daemon is missing
    (``scripts/deps/statsd.sh``).
    """
    why = await asyncio.to_thread(statsd.available)  # looks at the file system
    if why is not None:
        raise ServerUnavailable(f"statsd unavailable: {why}")
    async with _directory(directory, "dynaq-statsd-") as tmp:
        server = await _start_in_thread(lambda: statsd.start_statsd(tmp), statsd.StatsdServer.stop)
        try:
            yield server
        finally:
            await asyncio.to_thread(server.stop)


__all__ = [
    "Cluster",
    "NodeServer",
    "ServerUnavailable",
    "SettingValue",
    "free_port",
    "run_cassandra",
    "run_cluster",
    "run_node",
    "run_postgres",
    "run_statsd",
    "settings_env",
]
