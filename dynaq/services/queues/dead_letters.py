"""Dead-lettering: a message received ``max_receive_count`` times moves to its queue's
dead-letter queue instead of being served again.

Guarantees:

* **Atomic move.** The copy written to the dead-letter queue and the delete
  from the source queue are one store batch: after a crash or a store error
  the message is in one of the two queues, never both and never neither.
* **Exactly ``max_receive_count`` receives.** A receive that finds the message
  visible again after its ``max_receive_count``-th delivery moves it instead
  of serving it. Receive counts are kept by the node that owns the message's
  slice, in memory: a graceful handover carries them to the next owner, but a
  crash of the owner (``kill -9``) restarts the count, so a poison message can
  then be served up to ``max_receive_count`` more times before it moves.
* **What moves.** Body, attributes and group travel; the copy records its
  origin (queue, id, receive count, first enqueue time, time of the move).
* **Groups.** Moving a group's head unblocks the group: its next message is
  served by the next receive.
* **Batches.** Listeners (batch tracking) run before the move and must
  succeed: a batch item is recorded as failed and settled before its message
  leaves, so a batch completes once every item is acked or failed.
* **A missing dead-letter queue** (deleted after the policy was set) leaves
  the message where it is, served again; a warning is logged.
* A consumer deleting the message at the very moment it moves may see its
  delete succeed on the source while the copy also lands in the dead-letter
  queue: a duplicate, never a loss.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.messages import DeadLetterOrigin, NewMessage, decode
from dynaq.core.partitions import QueueState
from dynaq.errors import DynaqError
from dynaq.metrics import Metrics
from dynaq.services.catalog import Catalog, QueueInfo
from dynaq.services.queues.handover import HintRouter
from dynaq.services.queues.state import QueueStates
from dynaq.services.queues.writes import Writer
from dynaq.storage.base import Delete, Op, Put, Store

log = logging.getLogger(__name__)

Doomed = list[tuple[int, bytes]]
"""``(id, stored value)`` of each message a receive chose to dead-letter."""

FailureListener = Callable[[QueueInfo, list[tuple[int, dict[str, str]]], str], Awaitable[None]]
"""Told ``(id, attributes)`` of each message about to be dead-lettered (reason
``"dead_lettered"``) or removed by retention (``"expired"``) that has attributes;
if it raises, nothing moves or is removed (retried later)."""


class DeadLetters:
    """Moves messages over their queue's receive limit to its dead-letter queue."""

    def __init__(
        self,
        store: Store,
        catalog: Catalog,
        clock: Clock,
        metrics: Metrics,
        states: QueueStates,
        writer: Writer,
        hints: HintRouter,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._clock = clock
        self._metrics = metrics
        self._states = states
        self._writer = writer
        self._hints = hints
        self.failure_listeners: list[FailureListener] = []
        self.moved: dict[int, int] = {}
        """Messages dead-lettered from each queue (by number) by this node since it started."""

    async def move(self, info: QueueInfo, st: QueueState, doomed: Doomed) -> int:
        """Move ``doomed`` (held invisible by the receive that chose them) in one
        store batch; return how many moved. Failures are logged: the messages
        come back when their hold runs out and the next receive tries again."""
        policy = info.settings.redrive_policy
        if policy is None or not doomed:
            return 0
        try:
            return await self._move(info, st, doomed, policy.dead_letter_queue)
        except DynaqError as exc:
            log.warning(
                "dead-lettering failed; retrying after the hold",
                extra={"queue": info.name, "count": len(doomed), "error": str(exc)},
            )
            return 0

    async def _move(self, info: QueueInfo, st: QueueState, doomed: Doomed, target: str) -> int:
        dlq = await self._catalog.queue(target)  # QueueNotFound: logged by move()
        now_ms = self._clock.wall_ms()
        ids: list[int] = []
        copies: list[NewMessage] = []
        with_attributes: list[tuple[int, dict[str, str]]] = []
        for mid, raw in doomed:
            m = decode(mid, raw)
            f = st.inflight.get(mid)
            count = 0 if f is None else f.receive_count
            origin = DeadLetterOrigin(info.name, mid, count, m.enqueued_ms, now_ms)
            ids.append(mid)
            copies.append(NewMessage(m.body, m.attributes, m.group, origin=origin))
            if m.attributes:
                with_attributes.append((mid, m.attributes))
        if with_attributes:
            for listener in self.failure_listeners:
                await listener(info, with_attributes, "dead_lettered")
        w = await self._writer.prepare(dlq, copies)
        ops: list[Op] = [*w.ops, *(Delete(keys.message(info.number, i)) for i in ids)]
        existed = await self._store.write_batch(ops)
        self._writer.note_written(w)
        removed = [i for i, e in zip(ids, existed[len(w.ops) :], strict=True) if e]
        st.note_deleted(ids)
        for i in ids:
            st.forget(i)
        st.signal.set()  # a long poll goes on at once: what was behind them is servable
        self._hints.deleted(info, removed)
        self._states.add_depth(info.number, -len(removed))
        self._metrics.incr(f"{info.name}.dead_lettered.count", len(ids))
        self.moved[info.number] = self.moved.get(info.number, 0) + len(ids)
        log.info(
            "messages dead-lettered",
            extra={"queue": info.name, "dead_letter_queue": dlq.name, "count": len(ids)},
        )
        return len(ids)

    async def redrive_page(
        self,
        info: QueueInfo,
        rows: list[tuple[bytes, bytes]],
        to_queue: str | None,
        progress: Callable[[int, int], Put] | None = None,
    ) -> tuple[int, int]:
        """Move stored rows of ``info`` to ``to_queue`` or their origin queue in one
        store batch; return ``(moved, skipped)``. Skipped rows (nowhere to go) stay.

        ``progress(moved, skipped)``, when given, is the task record after this
        page; it is written in the same batch, so however the node dies the record
        counts exactly what was moved (a resumed task neither recounts nor loses a
        page). Only for stores whose records settle in batches
        (:attr:`~dynaq.storage.base.Store.records_settle_in_batches`).
        """
        targets: dict[str, tuple[QueueInfo, list[int], list[NewMessage]]] = {}
        skipped = 0
        for key, raw in rows:
            mid = keys.message_id(key)
            m = decode(mid, raw)
            name = to_queue or (m.origin.queue if m.origin is not None else None)
            target = None if name is None else await self._catalog.queue_or_none(name)
            if target is None or target.number == info.number:
                skipped += 1
                continue
            _, ids, msgs = targets.setdefault(target.name, (target, [], []))
            ids.append(mid)
            msgs.append(NewMessage(m.body, m.attributes, m.group))
        if not targets:
            if progress is not None:
                await self._store.write_batch([progress(0, skipped)])
            return 0, skipped
        writes = [await self._writer.prepare(t, msgs) for t, _, msgs in targets.values()]
        moved = [i for _, ids, _ in targets.values() for i in ids]
        ops: list[Op] = [op for w in writes for op in w.ops]
        ops.extend(Delete(keys.message(info.number, i)) for i in moved)
        deletes_from, deletes_to = len(ops) - len(moved), len(ops)
        if progress is not None:
            ops.append(progress(len(moved), skipped))
        existed = await self._store.write_batch(ops)
        for w in writes:
            self._writer.note_written(w)
        removed = [i for i, e in zip(moved, existed[deletes_from:deletes_to], strict=True) if e]
        st = self._states.get(info.number)
        if st is not None:
            st.note_deleted(moved)
            for i in moved:
                st.forget(i)
        self._hints.deleted(info, removed)
        self._states.add_depth(info.number, -len(removed))
        self._metrics.incr(f"{info.name}.redriven.count", len(moved))
        return len(moved), skipped
