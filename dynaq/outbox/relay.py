"""The outbox relay component: leadership over one outbox table, and its terms.

Leadership has two parts:

* **The ring proposes.** The live member that owns the table's lane (crc32 of
  the table name over dynaq's lanes, the same rule that assigns message
  lanes to nodes) is the only one that tries to lead. Every node computes it
  from its own :class:`MembershipView`; when views agree, exactly one node tries.
* **PostgreSQL disposes.** Before relaying, the candidate takes a
  session-level advisory lock (``pg_try_advisory_lock``, keyed by the table
  name) and marks rows *on that same session*. Two nodes that disagree about
  the ring therefore never both relay: the second cannot take the lock until
  the first's session ends, and a leader whose session dies cannot mark
  anything more. Each acquisition draws a fresh random ``leader_id`` (never
  reused), so rows a previous term had in flight are re-marked by the next.

A leader that loses ownership in the ring stops marking, waits (at most
``queue_timeout_s``) for its publishes in flight and their purges, and only
then releases the lock (**revoked**). One whose lock session fails stops at
once and backs off (**fenced**). A ``kill -9``'d leader's session is closed by
its kernel, so PostgreSQL frees the lock immediately; a leader cut off from
the database loses it when the server's TCP keepalives give up (~11 s here).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import zlib
from typing import Any
from uuid import UUID, uuid4

from dynaq.clock import Clock, SystemClock
from dynaq.config import OutboxConfig
from dynaq.core.ids import LANES
from dynaq.core.membership import MembershipView
from dynaq.errors import DynaqError
from dynaq.metrics import Metrics
from dynaq.outbox.events import (
    Event,
    EventHandler,
    EventReporter,
    LeaderAcquired,
    LeaderFenced,
    LeaderRevoked,
    MeterRead,
)
from dynaq.outbox.pipeline import Publisher, Term
from dynaq.outbox.schema import quote_table
from dynaq.tasks import cancel_and_wait, every, wait_event, wait_finished

log = logging.getLogger("dynaq.outbox")

_MAX_BACKOFF_S = 30.0
"""Longest wait between attempts to reach a database that keeps failing."""

# Session settings of the lock connection: the server notices a vanished
# leader (cable cut, frozen VM) after ~5 + 2*3 s and frees the lock.
_SESSION_SETUP = (
    "SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 2; "
    "SET tcp_keepalives_count = 3; SET application_name = 'dynaq-outbox'"
)


async def _no_reset_query(conn: Any) -> None:
    """Release pool connections without asyncpg's reset query.

    The pool runs only single statements (purge, reset, park) outside any
    transaction, so there is no session state to undo, and the default reset
    (``SELECT pg_advisory_unlock_all(); CLOSE ALL; ...``) would add a round
    trip after every purge, on the path from publish to the next dispatch.
    asyncpg still rolls back an open transaction and drops listeners itself.
    """


def table_lane(table: str) -> int:
    """The lane whose owner in the ring leads ``table``."""
    return zlib.crc32(table.encode()) % LANES


def lock_key(table: str) -> int:
    """The 64-bit advisory-lock key of ``table`` (stable across nodes and versions)."""
    digest = hashlib.blake2b(f"dynaq-outbox:{table}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class OutboxRelay:
    """Relays one outbox table into dynaq topics while this node leads it.

    Guarantees (see ``docs/outbox.md``): every committed row is published at
    least once; rows of one key are published in id order, never one after
    its successor, across failures and leader changes; at most one node
    relays at a time. ``start()`` returns at once (the database may be down;
    the relay keeps trying); ``stop()`` drains the current term and releases
    the lock.

    ``max_message_bytes`` (the node's ``http.max_message_bytes``) parks
    oversize rows before publishing; ``max_batch`` (``http.max_batch``) caps
    the rows per publish call.
    """

    def __init__(
        self,
        config: OutboxConfig,
        publisher: Publisher,
        view: MembershipView,
        metrics: Metrics,
        *,
        max_message_bytes: int | None = None,
        max_batch: int | None = None,
        clock: Clock | None = None,
    ) -> None:
        quote_table(config.table)  # fail fast on a bad name
        if max_batch is not None and config.max_publish_batch > max_batch:
            # A publish holds at most the queue service's batch limit.
            config = dataclasses.replace(config, max_publish_batch=max_batch)
        self.config = config
        self._publisher = publisher
        self._view = view
        self._metrics = metrics
        self._clock: Clock = clock or SystemClock()
        self._max_bytes = max_message_bytes
        self._handlers: list[EventHandler] = [EventReporter(config.table, metrics)]
        self._lock_key = lock_key(config.table)
        self._lane = table_lane(config.table)
        self._wake = asyncio.Event()
        self._leave = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._meter: asyncio.Task[None] | None = None
        self._pool: Any = None
        self._term: Term | None = None
        self.relayed = 0
        """Rows published and purged by this node since start."""
        view.on_change(self._view_changed)

    # public state ----------------------------------------------------------

    def add_event_handler(self, handler: EventHandler) -> None:
        """Also call ``handler`` for every event (after logging and statsd)."""
        self._handlers.append(handler)

    @property
    def is_leader(self) -> bool:
        """Whether this node relays now (a term that is draining after it ended does not count)."""
        return self._term is not None and self._term.active

    @property
    def leader_id(self) -> UUID | None:
        return self._term.leader_id if self._term is not None else None

    @property
    def in_flight_records(self) -> int:
        return len(self._term.in_flight) if self._term is not None else 0

    def owns_table(self) -> bool:
        """Whether this node's view of the ring makes it the table's leader."""
        return self._view.owner_of_lane(self._lane).name == self._view.me.name

    # lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Start contending for leadership in the background.

        Raises :class:`DynaqError` at once if the driver is missing.
        """
        try:
            import asyncpg  # noqa: F401
        except ImportError:
            raise DynaqError(
                "the outbox relay needs asyncpg: pip install 'dynaq[outbox]'"
            ) from None
        if self._task is None:
            self._stopping = False
            self._leave.clear()
            self._task = asyncio.create_task(self._run(), name=f"outbox-{self.config.table}")
            self._meter = asyncio.create_task(self._meter_loop(), name="outbox-meter")

    async def stop(self) -> None:
        """Drain the current term, release the lock, close connections; safe to call twice."""
        self._stopping = True
        self._leave.set()
        self._wake.set()
        try:
            await cancel_and_wait(self._meter)
            if self._task is not None:
                await wait_finished(self._task)
        finally:
            self._task = self._meter = None
            if self._pool is not None:
                pool, self._pool = self._pool, None
                try:
                    await asyncio.wait_for(pool.close(), 10)
                except (TimeoutError, OSError):
                    pool.terminate()

    # leadership ------------------------------------------------------------

    def _view_changed(self) -> None:
        self._wake.set()
        if self._term is not None and not self.owns_table():
            self._leave.set()

    def _emit(self, event: Event) -> None:
        for handler in self._handlers:
            try:
                handler(event)
            except Exception:  # a handler bug must not stop the relay
                log.exception("outbox event handler failed")

    def _count(self, n: int) -> None:
        self.relayed += n

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake early on a ring change or stop."""
        if self._stopping:
            return
        await wait_event(self._wake, self._clock, seconds)
        self._wake.clear()

    async def _run(self) -> None:
        import asyncpg

        base = self.config.io_error_backoff_ms / 1000
        failures = 0
        while not self._stopping:
            if not self.owns_table():
                await self._pause(60.0)
                continue
            started = self._clock.monotonic()
            try:
                await self._lead_once()
                failures = 0
                continue
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                error, bug = repr(exc), False
            except Exception as exc:  # a bug must not end leadership attempts for good
                error, bug = repr(exc), True
                log.exception("outbox relay failed", extra={"table": self.config.table})
            # A database that stays away is retried ever less often (to _MAX_BACKOFF_S):
            # a warning every half second for hours buries every other line.
            if self._clock.monotonic() - started > _MAX_BACKOFF_S:
                failures = 0  # it had been working: start over from the base
            delay = min(_MAX_BACKOFF_S, base * 2**failures)
            failures = min(failures + 1, 32)
            if not bug:
                log.warning(
                    "outbox database error",
                    extra={"table": self.config.table, "error": error, "retry_in_s": delay},
                )
            await self._pause(delay)

    async def _lead_once(self) -> None:
        """One attempt: take the lock and relay until revoked, fenced or stopped."""
        import asyncpg

        cfg = self.config
        conn = await asyncpg.connect(cfg.dsn, timeout=10)
        try:
            await conn.execute(_SESSION_SETUP)
            # Keep the session while waiting: another node leads (its view of
            # the ring differs, or it is draining) until its session ends.
            while not await conn.fetchval("SELECT pg_try_advisory_lock($1)", self._lock_key):
                await self._pause(cfg.io_error_backoff_ms / 1000)
                if self._stopping or not self.owns_table():
                    return
            if self._pool is None:
                self._pool = await asyncpg.create_pool(
                    cfg.dsn, min_size=1, max_size=2, timeout=10, reset=_no_reset_query
                )
            self._leave.clear()
            if self._stopping or not self.owns_table():
                return
            term = Term(
                config=cfg,
                lock_conn=conn,
                pool=self._pool,
                publisher=self._publisher,
                metrics=self._metrics,
                emit=self._emit,
                on_relayed=self._count,
                max_message_bytes=self._max_bytes,
                leader_id=uuid4(),
            )
            self._term = term
            self._emit(LeaderAcquired(term.leader_id))
            try:
                await term.run(self._leave)
            except Exception as exc:
                self._emit(LeaderFenced(repr(exc)))
                raise
            finally:
                self._term = None
            self._emit(LeaderRevoked("stopping" if self._stopping else "ring changed"))
        finally:
            await self._close(conn)

    async def _close(self, conn: Any) -> None:
        """Release the lock by ending the session (closing frees every session lock)."""
        try:
            await asyncio.wait_for(conn.close(), 5)
        except Exception:  # noqa: BLE001 - a dead session: drop it; the server frees its locks
            conn.terminate()

    # meter -----------------------------------------------------------------

    async def _meter_loop(self) -> None:
        last, t0 = self.relayed, self._clock.monotonic()

        async def read() -> None:
            nonlocal last, t0
            now = self._clock.monotonic()
            self._emit(MeterRead(self.relayed - last, now - t0))
            last, t0 = self.relayed, now

        await every(self.config.metrics_interval_s, read, clock=self._clock, what="outbox meter")
