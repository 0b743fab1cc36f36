"""The queue service facade: enqueue, receive, delete, peek, visibility, over the storage contract.

Guarantees:

* An enqueue returns only after its messages are durable in the store.
* Delivery is at-least-once: a received message that is not deleted within
  its visibility timeout is served again (its receive count goes up).
* Within one lane, messages are served oldest first; across lanes and
  partitions there is no global order (as in Dynamiq and SQS standard queues).
* Receives on this node serve only this node's slice of the keyspace;
  enqueues, deletes and peeks work for any id.
* ``depth`` is exact on a single node (every write goes through it); in a
  cluster each node counts only what passed through it, so the cluster-wide
  figure is ``approximate_depth``.

The work is done by parts the facade composes and hands the store, clock and
ring view: :class:`QueueStates` (serving state, depth), :class:`Writer`,
:class:`Receiver`, :class:`Deleter` (deletes and their listeners),
:class:`Transactions` (consume-produce, all or nothing),
:class:`Upkeep` (dedup and task-record sweepers, purges) and
:class:`HintRouter` (hints and handover).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.ids import IdGenerator, lane_of
from dynaq.core.keyspace import LaneRange
from dynaq.core.membership import Member, MembershipView
from dynaq.core.messages import Message, NewMessage, decode
from dynaq.metrics import Metrics
from dynaq.services.catalog import Catalog, QueueInfo
from dynaq.services.queue_records import check_visibility
from dynaq.services.queues import parking
from dynaq.services.queues.dead_letters import DeadLetters
from dynaq.services.queues.dedup_lock import DedupFileLock
from dynaq.services.queues.delays import DelayMover
from dynaq.services.queues.deletes import BeforeDelete, DeleteListener, Deleter
from dynaq.services.queues.depth import QueueDepths
from dynaq.services.queues.handover import HintRouter, PeerHints, PeerVisibility
from dynaq.services.queues.receipts import ReceiptActions
from dynaq.services.queues.receive import Receiver
from dynaq.services.queues.receive_request import StillWanted, always_wanted
from dynaq.services.queues.retention import RetentionSweeper
from dynaq.services.queues.ring_poll import RingPoll
from dynaq.services.queues.slice_handoff import SliceHandoff
from dynaq.services.queues.state import QueueStates
from dynaq.services.queues.stats import SliceStatistics
from dynaq.services.queues.task_retention import DEFAULT_RETENTION_S as DEFAULT_TASK_RETENTION_S
from dynaq.services.queues.task_retention import TaskRetention
from dynaq.services.queues.tasks import QueueTasks
from dynaq.services.queues.transactions import Transactions
from dynaq.services.queues.upkeep import Upkeep
from dynaq.services.queues.writes import Limits, Writer
from dynaq.services.snapshots import SnapshotPage, read_page
from dynaq.storage.base import Store

__all__ = ["BeforeDelete", "DeleteListener", "QueueRef", "QueueService"]

QueueRef = str | QueueInfo
"""A queue by name, or the :class:`QueueInfo` a handler already resolved (no second lookup)."""


class QueueService:
    """Queues on one node: writes go anywhere, receives serve this node's slice."""

    def __init__(
        self,
        store: Store,
        catalog: Catalog,
        view: MembershipView,
        clock: Clock,
        ids: IdGenerator,
        metrics: Metrics,
        limits: Limits,
        idle_rescan_s: float = 1.0,
        dedup_window_s: float = 300.0,
        task_retention_s: float = DEFAULT_TASK_RETENTION_S,
        sole_writer: bool = False,
        dedup_lock: DedupFileLock | None = None,
        shared_store: bool = False,
    ) -> None:
        """``sole_writer``: no other process writes this store (embedded, one worker);
        ``dedup_lock``: the lock a node's workers share for their dedup checks;
        ``shared_store``: the other members of the ring write this same store (a
        node's workers)."""
        self._store = store
        self._catalog = catalog
        self._sole_writer = sole_writer
        self.park_at_stop = sole_writer
        """Park the in-flight table in the store at :meth:`stop` (no peer to hand it to:
        a lone node, or the last member of a ring to stop, or peers that refused it)."""
        self.park_only: Callable[[int], bool] | None = None
        """With :attr:`park_at_stop`: park only the messages this keeps (by id)."""
        self._view = view
        self._peer_visibility: PeerVisibility | None = None
        self._clock = clock
        self._metrics = metrics
        self.states = QueueStates(view, clock)
        self.hints = HintRouter(view, catalog, self.states, clock, store)
        self.writer = Writer(
            store,
            clock,
            ids,
            metrics,
            self.states,
            self.hints,
            limits,
            dedup_window_s,
            sole_writer=sole_writer,
            dedup_lock=dedup_lock,
        )
        self.receiver = Receiver(
            store,
            catalog,
            view,
            clock,
            metrics,
            self.states,
            limits.max_batch,
            idle_rescan_s,
            max_receive_bytes=limits.max_receive_bytes,
        )
        self.dead_letters = DeadLetters(
            store, catalog, clock, metrics, self.states, self.writer, self.hints
        )
        self.receiver.dead_letter = self.dead_letters.move
        self.handoff = SliceHandoff(
            view, catalog, self.states, clock, lambda: self.receiver.in_ring,
            leaving=lambda: self.receiver.draining,
        )  # fmt: skip
        self.receiver.holding = self.handoff.holding
        self.ring_poll = RingPoll(self.receiver, view, clock)
        self.ring_receive_nowait = False
        """Whether a receive that does not wait also asks the other members when this
        one's slice has nothing (a node's workers: clients see one node)."""
        self.statistics = SliceStatistics(
            store, clock, view, self.states, metrics, catalog.cached_queues
        )
        self.statistics.dead_lettered = self.dead_letters.moved
        self.deleter = Deleter(store, self.states, self.hints, metrics)
        self.receipts = ReceiptActions(
            self.states, self.hints.owner_of, clock, self.delete, self.states.change_visibility,
            lambda: self._peer_visibility,
        )  # fmt: skip
        self.transactions = Transactions(
            store,
            self.writer,
            self.receipts,
            self.deleter.before_deleting,
            self.deleter.after_deleted,
        )
        serving = lambda: self.receiver.in_ring and not self.receiver.draining  # noqa: E731
        self.delays = DelayMover(store, catalog, clock, view, self.states, metrics, serving)
        self.retention = RetentionSweeper(
            store, catalog, clock, view, self.states, metrics, serving
        )
        self.retention.failure_listeners = self.dead_letters.failure_listeners
        self.task_retention = TaskRetention(store, clock, task_retention_s)
        self.tasks = QueueTasks(
            store, catalog, self.dead_letters, self.note_purged, clock, lambda: view.me.name,
            self.task_retention,
        )  # fmt: skip
        self.upkeep = Upkeep(store, clock, catalog, dedup_window_s, self.task_retention)
        self.depths = QueueDepths(store, catalog, self.states, self.upkeep, clock, shared_store)
        catalog.on_queue_change(self._queue_changed)
        catalog.on_queue_deleted(lambda tomb: self.upkeep.start_purge(tomb.number, tomb))
        view.on_change(self.handoff.ring_changed)
        metrics.add_gauge_provider(lambda: self.states.gauges(catalog))

    @property
    def limits(self) -> Limits:
        return self.writer.limits

    def set_ids(
        self, ids: IdGenerator, refresh: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Draw ids from ``ids`` from now on (a cluster node's leased writer slot);
        ``refresh`` persists a new high-water mark when drawing stalls against it."""
        self.writer.ids = ids
        self.writer.refresh_ids = refresh

    def set_peer_hints(self, peers: PeerHints) -> None:
        """Forward enqueue/delete hints (and, if ``peers`` can, visibility changes) to the
        owners of other slices."""
        self.hints.set_peers(peers)
        self.handoff.released = peers.released
        peers.on_returned(self.handoff.take_back)
        if isinstance(peers, PeerVisibility):
            self._peer_visibility = peers

    # lifecycle ------------------------------------------------------------

    async def start(self) -> None:
        """Load config and parked in-flight state, count messages, resume purges."""
        await self._catalog.reload()
        if self._sole_writer:
            await self.restore_parked()
        await self.depths.start()
        await self.upkeep.start()
        await self.tasks.start()
        self.delays.start()
        self.retention.start()
        self.statistics.start()

    async def sweep_dedup(self, limit: int = 100_000) -> int:
        """Delete dedup records whose window has passed; return how many."""
        return await self.upkeep.sweep_dedup(limit)

    def drain(self) -> None:
        """The node is shutting down: long polls answer now instead of waiting."""
        self.receiver.draining = True
        for st in self.states:
            st.signal.set()

    async def stop(self) -> None:
        """Stop background purges and tasks (they resume at the next start) and the sweeper,
        and let writes whose callers gave up land before the store closes."""
        await self.statistics.stop()
        await self.retention.stop()
        await self.delays.stop()
        await self.tasks.stop()
        await self.upkeep.stop()
        await self.depths.stop()
        await self.writer.wait_finishing()
        # No peer (or not every one) took the in-flight messages, or a release of
        # lanes given away came back after this node began to leave.
        back, only = self.handoff.returned, self.park_only if self.park_at_stop else None
        if self.park_at_stop or back:
            whole = self.park_at_stop and only is None
            keep = None if whole else (lambda mid: mid in back or (only is not None and only(mid)))
            await parking.park_unless_down(
                self._store, self._catalog, self.states, self._clock, self._view.me.name, keep
            )

    async def restore_parked(self) -> int:
        """Take back what the last node to stop parked (before serving anything)."""
        return await parking.restore(self._store, self._catalog, self.states, self._clock)

    async def wait_for_purges(self) -> None:
        """Wait until every pending purge finished (for tests and shutdown)."""
        await self.upkeep.wait_for_purges()

    def _queue_changed(self, old: QueueInfo | None, new: QueueInfo | None) -> None:
        if old is not None and (new is None or new.number != old.number):
            # Purges follow tombstones (on_queue_deleted, resumed by upkeep), never
            # a queue's absence from one node's view: a stale reload is no delete.
            self.states.forget(old.number)
            self.receiver.forget(old.number)
            self.writer.forget(old.number)
        if new is not None and not self.states.has_depth(new.number):
            self.states.set_depth(new.number, 0)
        if new is not None and old is not None and new.number == old.number:
            self.states.fit_partitions(new)

    # figures ---------------------------------------------------------------

    def partition_count(self, info: QueueInfo) -> int:
        """How many partitions this node serves the queue from."""
        return self.states.state(info).count

    def partition_ranges(self, info: QueueInfo) -> list[LaneRange]:
        """The lane ranges of the partitions this node serves the queue from."""
        return self.states.partition_ranges(info)

    async def ring_partitions(self, info: QueueInfo) -> list[tuple[int, int]]:
        """The partitions every live member serves the queue from (see :mod:`.stats`)."""
        peers = [m for m in self._view.members if m.name != self._view.me.name]
        ask = self._peer_visibility.slice_stats if self._peer_visibility else None
        mine = self.partition_ranges(info)
        return await self.statistics.ring_partitions(info, mine, peers, ask)

    async def depth(self, info: QueueInfo) -> int:
        """How many messages the queue stores (see :mod:`.depth`)."""
        return await self.depths.of(info)

    async def ring_stats(self, info: QueueInfo) -> dict[str, Any]:
        """The queue's figures summed over the ring (see :mod:`.stats`)."""
        peers = [m for m in self._view.members if m.name != self._view.me.name]
        ask = self._peer_visibility.slice_stats if self._peer_visibility else None
        stored = await self.depths.of_ring(info, alone=not peers)
        return await self.statistics.ring(info, peers, ask, stored)

    def note_purged(self, info: QueueInfo, n: int, purged: Callable[[int], bool]) -> None:
        """``n`` messages of ``info`` were removed by a purge task; ``purged`` tells the
        ids it removed (those in flight here are forgotten: no longer counted)."""
        st = self.states.get(info.number)
        if st is not None:
            st.forget_all([mid for mid in st.inflight if purged(mid)])
        self.hints.purged(info)  # the other members' in-flight entries
        self.states.add_depth(info.number, -n)
        self._metrics.incr(f"{info.name}.purged.count", n)

    def in_flight(self, info: QueueInfo) -> int:
        st = self.states.get(info.number)
        return 0 if st is None else len(st.inflight)

    # writes and reads -------------------------------------------------------

    async def _info(self, queue: QueueRef) -> QueueInfo:
        return queue if isinstance(queue, QueueInfo) else await self._catalog.queue(queue)

    def check_batch(self, messages: Sequence[NewMessage]) -> None:
        self.writer.check_batch(messages)

    def check_batch_size(self, n: int) -> None:
        self.receiver.check_batch_size(n)

    async def enqueue(self, queue: QueueRef, messages: Sequence[NewMessage]) -> list[int]:
        """Store ``messages`` durably in ``queue``; return their ids in order."""
        if not messages:
            return []
        self.writer.check_batch(messages)
        info = await self._info(queue)
        return await self.writer.write(info, messages)

    async def receive(
        self,
        queue: str,
        max_messages: int,
        visibility_timeout_s: float | None = None,
        wait_time_s: float = 0.0,
        wanted: StillWanted = always_wanted,
        per_group: int = 1,
    ) -> list[Message]:
        """Serve up to ``max_messages`` visible messages (see :meth:`Receiver.receive`).

        A long poll in a ring waits on every node's slice (:mod:`.ring_poll`);
        a receive that does not wait serves this node's slice only (unless
        :attr:`ring_receive_nowait`: then it asks the others once when empty).
        """
        peers, args = self._peer_visibility, (max_messages, visibility_timeout_s, wait_time_s)
        ring = wait_time_s > 0 or self.ring_receive_nowait
        if ring and peers is not None and len(self._view.members) > 1:
            out = await self.ring_poll.receive(peers, queue, *args, wanted, per_group)
        else:
            out = await self.receiver.receive(queue, *args, wanted, per_group)
        # How full the client's receive came back: here, not per peer or worker asked.
        self._metrics.gauge(f"{queue}.fill.count", 100.0 * len(out) / max_messages)
        return out

    async def peek(self, queue: QueueRef, ids: Iterable[int]) -> list[Message]:
        """Return the stored messages among ``ids`` without locking them."""
        info = await self._info(queue)
        ids = list(dict.fromkeys(ids))
        items = await self._store.get_many([keys.message(info.number, i) for i in ids])
        return [decode(i, it.value) for i, it in zip(ids, items, strict=True) if it is not None]

    async def snapshot(
        self, info: QueueInfo, from_id: int, to_id: int, limit: int, *, stored: bool = False
    ) -> SnapshotPage:
        """One page of the stored messages in ``[from_id, to_id]``, columnar or (``stored``)
        the stored values as they are (see :mod:`dynaq.services.snapshots`); takes no lock."""
        return await read_page(self._store, info, from_id, to_id, limit, stored=stored)

    # deletes & visibility -------------------------------------------------------

    def add_delete_listener(self, listener: DeleteListener | BeforeDelete) -> None:
        """Be told about every deleted message with attributes (see
        :meth:`Deleter.add_listener`)."""
        self.deleter.add_listener(listener)

    async def delete(self, queue: QueueRef, ids: Iterable[int]) -> list[int]:
        """Delete messages; return the ids that existed (see :meth:`Deleter.delete`)."""
        return await self.deleter.delete(await self._info(queue), ids)

    async def change_visibility(
        self, queue: QueueRef, ids: Iterable[int], visibility_timeout_s: float
    ) -> list[int]:
        """Extend (or with 0, release) in-flight messages through any node; return the ids
        that were in flight.

        Ids in another node's slice are forwarded to that node (the one that
        served them and holds their visibility); if it does not answer the call
        is a 503 (:class:`~dynaq.errors.NotServing`): retry it.
        """
        check_visibility(visibility_timeout_s)
        info = await self._info(queue)
        ids = list(dict.fromkeys(ids))
        peers = self._peer_visibility
        remote: dict[Member, list[int]] = {}
        if peers is not None:
            for i in ids:
                owner = self.hints.owner_of(lane_of(i))
                if owner is not None:
                    remote.setdefault(owner, []).append(i)
        forwarded = {i for owned in remote.values() for i in owned}
        changed = set(
            self.states.change_visibility(
                info, [i for i in ids if i not in forwarded], visibility_timeout_s
            )
        )
        if remote:
            assert peers is not None
            vt = visibility_timeout_s
            for answer in await asyncio.gather(
                *(peers.change_visibility(o, info.name, owned, vt) for o, owned in remote.items())
            ):
                changed.update(answer)
        return [i for i in ids if i in changed]
