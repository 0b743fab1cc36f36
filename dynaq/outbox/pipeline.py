"""One leadership term of mark-purge/reset (goharvest's MP/R), pipelined.

Three tasks share the term's state:

* the **marker** escrows the oldest pending rows under this term's
  ``leader_id`` (on the lock session, so only the lock holder can mark),
  sorts them by id, turns them into messages and dispatches each once (A4)
  fewer than ``max_in_flight`` records are in flight and (A5) no record of
  its key is in flight or held. A row whose key is busy is held behind its
  key (:mod:`.barriers`), not in front of the rows after it: the release of
  the key's record dispatches it. The marker marks the next batch as soon
  as it has dispatched or held the last one and fewer than ``mark_batch``
  rows are held, without waiting for room, so a mark overlaps the publish
  and purge before it: at most ``max_in_flight`` records are in flight and
  fewer than two batches are marked and held back. Held rows are marked,
  not in flight: if the term ends they stay marked under its ``leader_id``
  and the next term re-marks them, as it re-marks rows that were in flight;
* the **sender** publishes everything dispatched since its last round, one
  publish call per topic (in-flight keys are distinct, so a batch never holds
  two records of one key and batching cannot reorder a key), with message
  ids drawn when the rows were marked;
* the **completer** purges published rows, resets failed ones (then raises
  ``force_remark``) and parks rows that can never be published, in batched
  statements, and only then lowers each key's barrier.

Because a key's barrier falls only after its row is purged, at most one row
per key is ever in an indeterminate state: a crash or a failed publish can
duplicate a row but never put it after its successor. Duplicates carry the
same dedup id (``table:id``), so the queue drops them within its dedup window.
When ``force_remark`` is seen, the marker takes a new ``leader_id``, which
re-marks every unacknowledged row, the reset one included, in id order.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from uuid import UUID, uuid4

from dynaq.config import OutboxConfig
from dynaq.core.messages import NewMessage
from dynaq.errors import BadRecord, InvalidInput, PayloadTooLarge, TopicNotFound
from dynaq.metrics import Metrics
from dynaq.outbox.barriers import KeyBarriers
from dynaq.outbox.events import Event, LeaderRefreshed
from dynaq.outbox.schema import (
    OutboxRecord,
    Prepared,
    Queries,
    prepare_rows,
    record_from_row,
)
from dynaq.tasks import cancel_all

log = logging.getLogger("dynaq.outbox")


class Publisher(Protocol):
    """Where records go: :class:`dynaq.services.topics.TopicService` satisfies it."""

    async def publish(
        self,
        topic: str,
        messages: Sequence[NewMessage],
        *,
        message_ids: Sequence[str] | None = None,
    ) -> dict[str, list[int]]: ...


class Connection(Protocol):
    """The slice of an asyncpg connection (or pool) the term uses."""

    async def fetch(self, query: str, *args: Any) -> list[Any]: ...

    async def execute(self, query: str, *args: Any) -> str: ...


class Outcome(enum.Enum):
    PURGE = "purge"
    RESET = "reset"
    PARK = "park"


_Pending = tuple[OutboxRecord, NewMessage, str]


class Term:
    """Relays one outbox table for one leadership term; see the module docstring."""

    def __init__(
        self,
        *,
        config: OutboxConfig,
        lock_conn: Connection,
        pool: Connection,
        publisher: Publisher,
        metrics: Metrics,
        emit: Callable[[Event], None],
        on_relayed: Callable[[int], None],
        max_message_bytes: int | None,
        leader_id: UUID,
    ) -> None:
        self._cfg = config
        self._q = Queries.for_table(config.table)
        self._lock_conn = lock_conn
        self._pool = pool
        self._publisher = publisher
        self._metrics = metrics
        self._emit = emit
        self._on_relayed = on_relayed
        self._max_bytes = max_message_bytes
        self._prefix = f"outbox.{config.table}."
        self.leader_id = leader_id
        self._barriers: KeyBarriers[Prepared | BadRecord] = KeyBarriers()
        self._changed = asyncio.Condition()
        self._force_remark = False
        self._pending: list[_Pending] = []
        self._pending_ready = asyncio.Event()
        self._done: list[tuple[list[OutboxRecord], Outcome, str]] = []
        self._done_ready = asyncio.Event()
        self._closing = False
        self.active = True
        """False once the term ends (revoked, fenced): it marks and sends nothing new."""
        # Rows in flight when the leader id was refreshed may come back from
        # the re-mark after they were published; ``_skip`` remembers those
        # that completed, tagged with how many marks had started by then
        # (a mark started later cannot return them), so they are not sent twice.
        self._refreshed_in_flight: set[int] = set()
        self._skip: dict[int, int] = {}
        self._marks_started = 0

    @property
    def in_flight(self) -> dict[int, OutboxRecord]:
        """Records dispatched and not yet purged, reset or parked."""
        return self._barriers.in_flight

    # the term ----------------------------------------------------------------

    async def run(self, leave: asyncio.Event) -> None:
        """Relay until ``leave`` is set (returns after draining) or the lock session fails (raises).

        Either way no publish of this term is still running when it returns.
        """
        marker = asyncio.create_task(self._mark_loop(), name="outbox-mark")
        sender = asyncio.create_task(self._send_loop(), name="outbox-send")
        completer = asyncio.create_task(self._complete_loop(), name="outbox-complete")
        leaving = asyncio.create_task(leave.wait(), name="outbox-leave")
        tasks: list[asyncio.Task[None]] = [marker, sender, completer]
        try:
            await asyncio.wait([*tasks, leaving], return_when=asyncio.FIRST_COMPLETED)
            self.active = False
            # A task that ended on its own failed (the lock session, most
            # likely); one cancelled here may end with the driver's complaint
            # about the interrupted query, which is not a failure.
            error: BaseException | None = None
            for t in tasks:
                if t.done() and not t.cancelled():
                    error = t.exception() or error
            await cancel_all([marker])
            if error is not None:
                # Fenced: publish nothing new; rows not yet sent stay marked
                # and the next leader re-marks them.
                self._closing = True
                await self._drop_pending()
            await self._drain()
            if error is not None:
                raise error
        finally:
            await cancel_all([*tasks, leaving])

    async def _drain(self) -> None:
        """Let publishes in flight finish and their rows be purged (bounded by queue_timeout_s)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._cfg.queue_timeout_s), self._changed:
                await self._changed.wait_for(lambda: not self.in_flight)
        if self.in_flight:
            log.warning(
                "outbox term ended with records in flight",
                extra={"table": self._cfg.table, "records": len(self.in_flight)},
            )

    async def _drop_pending(self) -> None:
        pending, self._pending = self._pending, []
        await self._release([rec for rec, _, _ in pending], None)

    # marker (A1-A9) ----------------------------------------------------------

    async def _mark_loop(self) -> None:
        cfg = self._cfg
        backoff = cfg.mark_backoff_ms / 1000
        bars = self._barriers
        while True:
            if self._force_remark and bars.held:
                # A reset while rows wait behind their keys: a held successor of
                # the reset row must not go first, so everything is re-marked.
                self._refresh()
            self._force_remark = False  # A2
            # No wait for room here (goharvest's A3 has one): the next batch is
            # marked while the previous one is published and purged, so the
            # mark's round trip is off the critical path. A4 below still bounds
            # what is in flight.
            self._marks_started += 1
            mark_no = self._marks_started
            rows = await self._lock_conn.fetch(self._q.mark, self.leader_id, cfg.mark_batch)  # A3
            if not rows:
                self._prune_skip(mark_no)
                await asyncio.sleep(backoff)
                continue
            recs = sorted(map(record_from_row, rows), key=lambda r: r.id)
            # Rows become messages now, while earlier ones are being published,
            # so that work is not done on the critical path once room opens up.
            for rec, msg in prepare_rows(recs, self._cfg.table, self._max_bytes):
                if len(bars.in_flight) >= cfg.max_in_flight:  # A4
                    await self._wait_for(
                        lambda: len(bars.in_flight) < cfg.max_in_flight or self._force_remark
                    )
                if self._force_remark:  # A9: a reset happened; start over from the head
                    self._refresh()
                    break
                if bars.busy(rec.key):  # A5
                    bars.hold(rec, msg)
                else:
                    self._dispatch_unless_done(rec, msg)
            else:
                await self._wait_for(lambda: bars.held < cfg.mark_batch or self._force_remark)
            self._prune_skip(mark_no)

    async def _wait_for(self, predicate: Callable[[], bool]) -> None:
        if predicate():
            return
        async with self._changed:
            await self._changed.wait_for(predicate)

    def _refresh(self) -> None:
        self._barriers.clear_held()  # marked under the old id: the new one re-marks them
        self._refreshed_in_flight.update(self.in_flight)
        self.leader_id = uuid4()
        self._emit(LeaderRefreshed(self.leader_id))

    def _prune_skip(self, mark_no: int) -> None:
        if self._skip:
            self._skip = {i: n for i, n in self._skip.items() if n > mark_no}

    def _dispatch_unless_done(self, rec: OutboxRecord, msg: Prepared | BadRecord) -> bool:
        """Dispatch ``rec`` unless it was published under the previous leader id."""
        if self._skip.pop(rec.id, None) is not None:
            return False
        self._dispatch(rec, msg)
        return True

    def _dispatch(self, rec: OutboxRecord, msg: Prepared | BadRecord) -> None:
        self._barriers.take(rec)  # A6 + A7
        if isinstance(msg, BadRecord):
            self._complete([rec], Outcome.PARK, str(msg))
            return
        self._pending.append((rec, *msg))  # A8
        self._pending_ready.set()

    # sender ---------------------------------------------------------------

    async def _send_loop(self) -> None:
        while True:
            await self._pending_ready.wait()
            self._pending_ready.clear()
            if self._closing or not self._pending:
                continue
            batch, self._pending = self._pending, []
            by_topic: dict[str, list[_Pending]] = {}
            for item in batch:
                by_topic.setdefault(item[0].topic, []).append(item)
            size = self._cfg.max_publish_batch
            await asyncio.gather(
                *(
                    self._send(topic, items[i : i + size])
                    for topic, items in by_topic.items()
                    for i in range(0, len(items), size)
                )
            )

    async def _send(self, topic: str, items: list[_Pending]) -> None:
        recs = [rec for rec, _, _ in items]
        try:
            async with asyncio.timeout(self._cfg.queue_timeout_s):
                await self._publisher.publish(
                    topic, [m for _, m, _ in items], message_ids=[i for _, _, i in items]
                )
        except TopicNotFound:
            self._complete(recs, Outcome.PARK, f"topic {topic!r} does not exist")
        except (PayloadTooLarge, InvalidInput) as exc:
            if len(items) == 1:
                self._complete(recs, Outcome.PARK, str(exc))
            else:  # find the bad row(s): publish one by one
                for item in items:
                    await self._send(topic, [item])
        except Exception as exc:  # noqa: BLE001 - any other failure is retried via reset + re-mark
            self._metrics.incr(self._prefix + "publish_failed.count", len(recs))
            log.warning(
                "outbox publish failed; records reset",
                extra={
                    "table": self._cfg.table,
                    "topic": topic,
                    "records": len(recs),
                    "error": repr(exc),
                },
            )
            self._complete(recs, Outcome.RESET)
        else:
            self._complete(recs, Outcome.PURGE)

    # completer (B1-B5) --------------------------------------------------------

    def _complete(self, recs: list[OutboxRecord], outcome: Outcome, reason: str = "") -> None:
        self._done.append((recs, outcome, reason))
        self._done_ready.set()

    async def _complete_loop(self) -> None:
        while True:
            await self._done_ready.wait()
            self._done_ready.clear()
            done, self._done = self._done, []
            purged = [r for recs, outcome, _ in done if outcome is Outcome.PURGE for r in recs]
            if purged:
                await self._retry(self._q.purge, [r.id for r in purged])  # B1
                await self._release(purged, Outcome.PURGE)
                self._metrics.incr(self._prefix + "published.count", len(purged))
                self._on_relayed(len(purged))
            for rec, reason in (
                (r, reason)
                for recs, outcome, reason in done
                if outcome is Outcome.PARK
                for r in recs
            ):
                await self._retry(self._q.park, rec.id, reason[:1000])
                self._metrics.incr(self._prefix + "parked.count")
                log.error(
                    "outbox row parked",
                    extra={
                        "table": self._cfg.table,
                        "id": rec.id,
                        "topic": rec.topic,
                        "reason": reason,
                    },
                )
                await self._release([rec], Outcome.PARK)
            by_leader: dict[UUID, list[OutboxRecord]] = {}
            for recs, outcome, _ in done:
                if outcome is Outcome.RESET:
                    for rec in recs:
                        by_leader.setdefault(rec.leader_id, []).append(rec)
            for leader_id, recs in by_leader.items():
                await self._retry(self._q.reset, [r.id for r in recs], leader_id)  # B2
                self._force_remark = True  # B3 (before the barriers fall)
                await self._release(recs, Outcome.RESET)  # B4 + B5

    async def _retry(self, query: str, *args: Any) -> None:
        """Run an idempotent statement until it succeeds (the term's end cancels it)."""
        while True:
            try:
                await self._pool.execute(query, *args)
                return
            except Exception as exc:  # noqa: BLE001 - the database is away: back off, keep the barrier up
                log.warning(
                    "outbox statement failed; retrying",
                    extra={"table": self._cfg.table, "error": repr(exc)},
                )
                await asyncio.sleep(self._cfg.io_error_backoff_ms / 1000)

    async def _release(self, recs: list[OutboxRecord], outcome: Outcome | None) -> None:
        bars = self._barriers
        for rec in recs:
            freed = bars.release(rec)
            if rec.id in self._refreshed_in_flight:
                self._refreshed_in_flight.discard(rec.id)
                if outcome is Outcome.PURGE or outcome is Outcome.PARK:
                    self._skip[rec.id] = self._marks_started
                    bars.forget_held(rec)  # its re-marked copy, if it waits
            # The key's next held row goes now, unless the term is ending (it
            # stays marked) or a reset is pending (the re-mark orders it anew).
            if freed and self.active and not self._closing and not self._force_remark:
                while (held := bars.next_held(rec.key)) is not None:
                    if self._dispatch_unless_done(*held):
                        break
        async with self._changed:
            self._changed.notify_all()
