"""Transactional consume-produce: delete received messages and enqueue outputs, all or nothing.

A transaction names received messages by receipt (the inputs) and new
messages for any queues (the outputs). It commits only if every receipt is
*current*: its message is in flight on the node that served it, under that
very delivery, with its visibility not run out, and still stored. Otherwise
nothing is applied and the call fails with
:class:`~dynaq.errors.StaleReceipts` (409) naming the receipts that were not.

Guarantees:

* **All or nothing, on every backend.** Deletes, outputs and the outputs'
  dedup records go to the store as *one* :meth:`~dynaq.storage.base.Store.write_batch`,
  which the storage contract makes atomic, and that survives a kill -9 of
  the node at any point:

  - LMDB (embedded): one write transaction; it committed (fsync) or it did not.
  - Cassandra: one LOGGED batch when it spans partitions. The batch log is
    the intent record: the coordinator writes the whole batch to the batch
    log on other replicas first, then applies it; if the coordinator dies,
    those replicas replay it. Cassandra's batches are atomic, not isolated:
    for a moment a reader may see outputs before the inputs' deletes, which
    is harmless because the inputs are held invisible (below).
  - Riak: the store's journal (:mod:`dynaq.storage.riak_journal`) is the
    intent record: the whole batch is written as one journal object first,
    then applied key by key (puts of fixed bytes, deletes: idempotent), then
    the journal object is removed; every running store (and every start)
    replays journal objects older than ``journal_replay_after_s`` (every
    ``journal_replay_every_s``; both 60 s by default). Until then a
    transaction interrupted by a crash is half applied; and a replay rewrites
    outputs a consumer may have deleted meanwhile (a duplicate delivery).

  A second, application-level intent record on top would add a store round
  trip per transaction and buy nothing these do not already give.

* **No redelivery, no second transaction, between the check and the write.**
  The receipts are checked on the nodes that served them (forwarded, signed,
  in a ring), and there, with no await between check and claim, every input
  is *claimed* for this transaction and held invisible for at least
  :data:`~dynaq.services.queues.receipts.TRANSACTION_HOLD_S`. A claimed
  delivery is not current for any other transaction: the same one sent again
  while the first is still running gets a retriable 409 ``receipts_in_use``
  (:class:`~dynaq.errors.ReceiptsInUse`), and once the first committed its
  retry is answered as a replay; a transaction that fails after claiming
  releases its claims. The claim lives with the in-flight
  state on the owner: it ends when the message is served again.
  This hold, not the dedup ids, is what stops a redelivery: an output's dedup
  id derived from a *delivery* would differ for the next delivery, so it
  could not make a second processing harmless. (Dedup ids derived from the
  input message alone would, but only within the dedup window; the hold
  works regardless.) Left open: a node that served an input dies between
  the hold and the write (milliseconds); a new owner serves the input again
  at once, and if that second delivery's transaction commits first, both
  commit. Inputs are re-read from the store just before the write, so the
  window is that single write.

* **Retries are safe.** Outputs with a ``dedup_id`` use the queue's dedup
  records (:class:`~dynaq.services.queues.writes.Writer`), serialized per
  queue on this node: an output already stored in the window is answered
  with the first id and ``duplicate``. A transaction retried after its
  first attempt committed (the answer was lost) finds its inputs gone; when
  every output has a dedup id and every one is already stored, that is the
  first attempt's effect, so it is answered as a success with
  ``replayed`` (every output ``duplicate``, nothing deleted) instead of 409.

* A refused (or failed) transaction releases its claims: its current inputs
  are back to their own visibility timeout, and a corrected transaction can
  commit them. A coordinator that dies between its claims and its write, or
  whose write fails (its outcome unknown), leaves them claimed until the hold
  (30 s) runs out; retries meanwhile get ``receipts_in_use``. Left open: a
  write of unknown outcome that lands later than that (a Riak batch finished
  by the journal's replay): a retry after the hold is then answered
  ``stale_receipt`` although the transaction is applied.

A crash point (:class:`~dynaq.services.queues.crash_point.CrashPoint`) kills
the node with SIGKILL at a named step, for tests.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from dynaq.core import keys
from dynaq.core.messages import NewMessage
from dynaq.errors import DynaqError, InvalidInput, ReceiptsInUse, StaleReceipts
from dynaq.services.catalog import QueueInfo
from dynaq.services.queues.crash_point import CrashPoint
from dynaq.services.queues.receipts import Claim, ReceiptActions
from dynaq.services.queues.writes import PreparedWrite, Writer
from dynaq.storage.base import Delete, Op, Store


@dataclass(frozen=True, slots=True)
class TxnDelete:
    """An input: the message and delivery a receipt names."""

    info: QueueInfo
    message_id: int
    delivery: int
    receipt: str


@dataclass(frozen=True, slots=True)
class TxnEnqueue:
    """An output: a new message for a queue."""

    info: QueueInfo
    message: NewMessage


@dataclass(frozen=True, slots=True)
class Enqueued:
    """Where an output went; ``duplicate`` if its dedup id was already stored."""

    queue: str
    id: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class TxnOutcome:
    """A committed transaction: outputs in request order, and how many inputs it deleted."""

    enqueued: list[Enqueued]
    deleted: int
    replayed: bool = False
    """The transaction had committed before (a retry): nothing was written now."""


BeforeDeleting = Callable[[QueueInfo, list[int]], Awaitable[dict[int, dict[str, str]]]]
AfterDeleted = Callable[
    [QueueInfo, list[int], list[int], dict[int, dict[str, str]]], Awaitable[None]
]


class Transactions:
    """Runs transactions for one node (see the module for the guarantees)."""

    def __init__(
        self,
        store: Store,
        writer: Writer,
        receipts: ReceiptActions,
        before_deleting: BeforeDeleting,
        after_deleted: AfterDeleted,
    ) -> None:
        self._store = store
        self._writer = writer
        self._receipts = receipts
        self._before_deleting = before_deleting
        self._after_deleted = after_deleted
        self.crash = CrashPoint(None)

    def check(self, deletes: Sequence[TxnDelete], enqueues: Sequence[TxnEnqueue]) -> None:
        """Refuse a transaction that could never commit, before anything is held."""
        if not deletes and not enqueues:
            raise InvalidInput("a transaction needs at least one delete or enqueue")
        n, limit = len(deletes) + len(enqueues), self._writer.limits.max_batch
        if n > limit:
            raise InvalidInput(f"a transaction holds at most {limit} deletes and enqueues, got {n}")
        seen: set[tuple[int, int]] = set()
        for i, d in enumerate(deletes):
            if (d.info.number, d.message_id) in seen:
                raise InvalidInput(f"delete[{i}] names a message an earlier delete names")
            seen.add((d.info.number, d.message_id))
        for e in enqueues:
            self._writer.check_message(e.message)
            self._writer.check_for_queue(e.info, [e.message])

    async def run(self, deletes: Sequence[TxnDelete], enqueues: Sequence[TxnEnqueue]) -> TxnOutcome:
        """Apply the transaction whole, or raise and apply nothing (see the module)."""
        self.check(deletes, enqueues)
        stale, busy, claimed = await self._receipts.hold(
            [(d.info, d.message_id, d.delivery) for d in deletes]
        )
        self.crash.reached("held")
        messages = [e.message for e in enqueues]
        # Once the write is handed to the store it lands; a caller that gives up
        # must not skip the accounting (depth, hints to owners) nor free the dedup lock.
        return await self._writer.run_to_completion(
            self._commit_or_release(deletes, enqueues, stale, busy, claimed), messages, always=True
        )

    async def _commit_or_release(
        self,
        deletes: Sequence[TxnDelete],
        enqueues: Sequence[TxnEnqueue],
        stale: set[tuple[str, int]],
        busy: set[tuple[str, int]],
        claimed: list[Claim],
    ) -> TxnOutcome:
        """:meth:`_commit`; if it fails before its write, release the inputs' claims, so
        a retry finds its receipts current again. A failed write keeps them: its
        outcome is unknown (a timeout that applied, a Riak batch its journal will
        finish), and a retry must see ``receipts_in_use`` until the hold runs out,
        not commit a second time or be told its inputs are stale."""
        writing: list[bool] = []
        try:
            return await self._commit(deletes, enqueues, stale, busy, writing)
        except DynaqError:
            if not writing:
                await self._receipts.release(claimed)
            raise

    async def _commit(
        self,
        deletes: Sequence[TxnDelete],
        enqueues: Sequence[TxnEnqueue],
        stale: set[tuple[str, int]],
        busy: set[tuple[str, int]],
        writing: list[bool],
    ) -> TxnOutcome:
        per_queue: dict[int, tuple[QueueInfo, list[int]]] = {}
        for i, e in enumerate(enqueues):
            per_queue.setdefault(e.info.number, (e.info, []))[1].append(i)
        infos = [info for info, _ in per_queue.values()]
        messages = [e.message for e in enqueues]
        async with self._writer.dedup.guard(infos, messages):
            items = await self._store.get_many(
                [keys.message(d.info.number, d.message_id) for d in deletes]
            )
            missing = {
                (d.info.name, d.message_id)
                for d, it in zip(deletes, items, strict=True)
                if it is None
            }
            prepared: list[tuple[PreparedWrite, list[int]]] = []
            for info, idx in per_queue.values():
                w = await self._writer.prepare(info, [messages[i] for i in idx])
                prepared.append((w, idx))
            self.crash.reached("prepared")
            enqueued = _placed(enqueues, prepared)
            refused = stale | busy | missing
            if refused:
                if _is_replay(refused, missing, enqueues, enqueued):
                    return TxnOutcome(enqueued, 0, replayed=True)
                final = refused - busy
                if not final:
                    # Claimed by a transaction still committing (this one, sent again?):
                    # only its outcome tells whether these inputs go; retry to learn it.
                    raise ReceiptsInUse(
                        "another transaction holds these receipts and may still commit "
                        "them; nothing was applied: retry",
                        [d.receipt for d in deletes if (d.info.name, d.message_id) in busy],
                    )
                names = [d.receipt for d in deletes if (d.info.name, d.message_id) in final]
                raise StaleReceipts(
                    f"{len(names)} of the transaction's receipts are not current (received "
                    "again since, expired, unknown or already deleted); nothing was applied",
                    names,
                )
            by_queue: dict[int, tuple[QueueInfo, list[int]]] = {}
            for d in deletes:
                by_queue.setdefault(d.info.number, (d.info, []))[1].append(d.message_id)
            attrs = {
                n: await self._before_deleting(info, ids) for n, (info, ids) in by_queue.items()
            }
            ops: list[Op] = [
                Delete(keys.message(info.number, i)) for info, ids in by_queue.values() for i in ids
            ]
            for w, _ in prepared:
                ops += w.ops
            writing.append(True)
            await self._store.write_batch(ops)
            self.crash.reached("written")
        for w, _ in prepared:
            self._writer.note_written(w)
        for n, (info, ids) in by_queue.items():
            # Every input was read just now under its hold: each one existed.
            await self._after_deleted(info, ids, ids, attrs[n])
        return TxnOutcome(enqueued, len(deletes))


def _placed(
    enqueues: Sequence[TxnEnqueue], prepared: list[tuple[PreparedWrite, list[int]]]
) -> list[Enqueued]:
    """Each output's id, in request order; ``duplicate`` unless this write stores it
    (a second copy in the same transaction is a duplicate of the first)."""
    out: list[Enqueued | None] = [None] * len(enqueues)
    for w, idx in prepared:
        fresh = set(w.stored)
        for i, mid in zip(idx, w.ids, strict=True):
            out[i] = Enqueued(enqueues[i].info.name, mid, duplicate=mid not in fresh)
            fresh.discard(mid)
    assert all(e is not None for e in out)
    return [e for e in out if e is not None]


def _is_replay(
    refused: set[tuple[str, int]],
    missing: set[tuple[str, int]],
    enqueues: Sequence[TxnEnqueue],
    enqueued: list[Enqueued],
) -> bool:
    """Whether a refused transaction is one that already committed: every refused input
    is gone, and every output carries a dedup id that is already stored."""
    return (
        bool(enqueues)
        and refused <= missing
        and all(e.message.dedup_id is not None for e in enqueues)
        and all(e.duplicate for e in enqueued)
    )
