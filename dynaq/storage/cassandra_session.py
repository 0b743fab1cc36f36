"""The Cassandra driver behind one small session object: connect, run on the reactor, close.

Every query goes out with ``Session.execute_async``; the driver's reactor
thread (libev, bundled in the wheel; asyncio's reactor otherwise) completes
the driver's future and the result is handed to the event loop with
``call_soon_threadsafe``. Connecting and shutting down block, so they run in
a worker thread. Driver exceptions are translated where they leave here:
timeouts, unavailable replicas and lost connections become
:class:`StorageUnavailable` (retriable), anything else :class:`StorageError`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Sequence
from typing import Any

from dynaq.errors import InvalidInput, StorageError, StorageUnavailable
from dynaq.storage.cassandra_schema import Statements, create_schema

try:
    from cassandra import ConsistencyLevel, DriverException
    from cassandra import OperationTimedOut as _OperationTimedOut
    from cassandra import Timeout as _Timeout
    from cassandra import Unavailable as _Unavailable
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable
    from cassandra.connection import ConnectionException
    from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
    from cassandra.query import BatchStatement as BatchStatement
    from cassandra.query import BatchType as BatchType
    from cassandra.query import tuple_factory
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "the Cassandra store needs cassandra-driver: pip install 'dynaq[cassandra]'"
    ) from exc

# What the driver raises: its own tree plus two plain-Exception subclasses.
_DRIVER_ERRORS = (DriverException, NoHostAvailable, ConnectionException)
_UNAVAILABLE = (
    NoHostAvailable,
    _OperationTimedOut,
    _Timeout,
    _Unavailable,
    ConnectionException,
)


def connection_class() -> Any:
    try:
        from cassandra.io.libevreactor import LibevConnection

        return LibevConnection
    except ImportError:  # pragma: no cover - the wheel bundles libev
        from cassandra.io.asyncioreactor import AsyncioConnection

        return AsyncioConnection


def translate(exc: BaseException) -> StorageError:
    if isinstance(exc, _UNAVAILABLE):
        return StorageUnavailable(f"Cassandra unavailable: {type(exc).__name__}: {exc}")
    return StorageError(f"Cassandra error: {type(exc).__name__}: {exc}")


log = logging.getLogger(__name__)


class CassandraSession:
    """One connected driver session with the keyspace's prepared statements."""

    def __init__(
        self,
        hosts: Sequence[str],
        *,
        keyspace: str,
        replication_factor: int,
        protocol_version: int,
        pool_size: int,
        request_timeout_s: float,
        connect_timeout_s: float,
        messages_gc_grace_s: int,
    ) -> None:
        self._points = [parse_host(h) for h in hosts]
        self._ks = keyspace
        self._rf = replication_factor
        self._protocol = protocol_version
        self._pool_size = pool_size
        self._timeout_s = request_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._gc_grace_s = messages_gc_grace_s
        self._cluster: Any = None
        self._session: Any = None
        self._st: Statements | None = None

    @property
    def keyspace(self) -> str:
        return self._ks

    @property
    def metadata(self) -> Any:
        """The driver's cluster metadata (schema inspection in tests and tools)."""
        if self._cluster is None:
            raise StorageUnavailable("store is closed")
        return self._cluster.metadata

    @property
    def is_open(self) -> bool:
        return self._session is not None

    @property
    def statements(self) -> Statements:
        if self._st is None:
            raise StorageUnavailable("store is closed")
        return self._st

    async def open(self) -> None:
        if self._session is not None:
            return
        try:
            self._cluster, self._session, self._st = await asyncio.to_thread(self._connect)
        except _DRIVER_ERRORS as exc:
            raise translate(exc) from exc
        except OSError as exc:
            raise StorageUnavailable(f"cannot reach Cassandra: {exc}") from exc
        self._check_durability()

    def replication(self) -> dict[str, str]:
        """The keyspace's replication settings as Cassandra has them (not as configured)."""
        ks = self.metadata.keyspaces.get(self._ks)
        if ks is None:
            return {}
        strategy = ks.replication_strategy
        options = getattr(strategy, "options_map", None) or {}
        out = {str(k): str(v) for k, v in options.items()}
        out["class"] = type(strategy).__name__
        rf = getattr(strategy, "replication_factor", None)
        if rf is not None:
            out["replication_factor"] = str(rf)
        return out

    def _check_durability(self) -> None:
        """Say at start-up what the keyspace really promises.

        Writes and reads use LOCAL_QUORUM: with a replication factor of 3 an
        acknowledged write is on two replicas and survives the loss of any one
        Cassandra node. Below 3 one node's loss can lose acknowledged messages;
        and ``CREATE KEYSPACE IF NOT EXISTS`` never changes an existing
        keyspace, so a configured factor that differs from the live one is
        reported too (``ALTER KEYSPACE`` changes it).
        """
        factors = [
            int(v) for k, v in self.replication().items() if k != "class" and str(v).isdigit()
        ]
        live = min(factors, default=0)
        if live and live != self._rf:
            log.warning(
                "Cassandra keyspace has another replication factor than configured; "
                "ALTER KEYSPACE to change it",
                extra={"keyspace": self._ks, "live_rf": live, "configured_rf": self._rf},
            )
        if live and live < 3:
            log.warning(
                "Cassandra replication factor below 3: an acknowledged message is lost "
                "if the Cassandra node(s) holding it are lost (use 3 for production)",
                extra={"keyspace": self._ks, "replication_factor": live},
            )

    def _connect(self) -> tuple[Any, Any, Statements]:
        from cassandra.policies import HostDistance

        profile = ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy()),
            consistency_level=ConsistencyLevel.LOCAL_QUORUM,
            serial_consistency_level=ConsistencyLevel.LOCAL_SERIAL,
            request_timeout=self._timeout_s,
            row_factory=tuple_factory,
        )
        cluster = Cluster(
            contact_points=self._points,
            protocol_version=self._protocol,
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            connection_class=connection_class(),
            connect_timeout=self._connect_timeout_s,
            compression=False,
            # Without it a multi-segment request (a batch) waits for the
            # server's delayed ACK: measured 52 ms per 100-message batch.
            sockopts=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        )
        if self._protocol < 3:
            cluster.set_core_connections_per_host(HostDistance.LOCAL, self._pool_size)
        try:
            session = cluster.connect()
            # Write timestamps from the coordinator, never from this node's clock:
            # a node whose clock is behind would write tombstones older than the
            # messages they delete (the delete silently does nothing), and one
            # ahead would shadow every later write to its keys.
            session.use_client_timestamp = False
            create_schema(session, self._ks, self._rf, self._gc_grace_s)
            return cluster, session, Statements(session, self._ks)
        except BaseException:
            cluster.shutdown()
            raise

    async def close(self) -> None:
        cluster, self._cluster, self._session, self._st = self._cluster, None, None, None
        if cluster is not None:
            await asyncio.to_thread(cluster.shutdown)

    async def run(self, stmt: Any, params: Sequence[Any] | None = None) -> list[Any]:
        """Execute on the driver's reactor; collect every page; translate errors."""
        session = self._session
        if session is None:
            raise StorageUnavailable("store is closed")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[list[Any]] = loop.create_future()
        rows: list[Any] = []
        try:
            rf = session.execute_async(stmt, params)
        except _DRIVER_ERRORS as exc:
            raise translate(exc) from exc

        def on_page(page: list[Any] | None) -> None:
            # Runs on the driver's reactor thread; it must always answer the loop.
            try:
                if page:
                    rows.extend(page)
                if rf.has_more_pages:
                    rf.start_fetching_next_page()
                    return
            except Exception as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                loop.call_soon_threadsafe(resolve, fut, None, exc)
                return
            loop.call_soon_threadsafe(resolve, fut, rows, None)

        def on_error(exc: BaseException) -> None:
            loop.call_soon_threadsafe(resolve, fut, None, exc)

        rf.add_callbacks(on_page, on_error)
        try:
            return await fut
        except _DRIVER_ERRORS as exc:
            raise translate(exc) from exc


def resolve(fut: asyncio.Future[Any], rows: Any, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(rows)


def parse_host(host: str) -> tuple[str, int]:
    name, sep, port = host.rpartition(":")
    if not sep:
        return host, 9042
    try:
        return name.strip("[]"), int(port)
    except ValueError:
        raise InvalidInput(f"invalid Cassandra host {host!r}; use host:port") from None
