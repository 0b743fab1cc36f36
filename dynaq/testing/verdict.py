"""What a queue workload's :class:`~dynaq.testing.history.History` proves: :func:`check`
reads a finished history and gives a :class:`Verdict`.

* **lost** -- acknowledged enqueues never delivered. Must be 0.
* **duplicates** -- deliveries beyond the first, each attributed to a cause
  the README allows: ``visibility_expiry`` (the earlier delivery's visibility
  timeout could have passed before the later receive was served, and its
  delete had not been acknowledged before that receive was sent),
  ``delete_unacknowledged`` (the earlier delete failed or its answer was lost,
  and the timeout could have passed), ``node_fault`` (a fault was injected
  between the two deliveries), ``resent`` (the same token stored as a second
  message: a send whose answer was lost, sent again), or ``unexplained`` (must
  be 0). A message served again after its delete was acknowledged, by a
  receive sent after that acknowledgement, is ``unexplained`` even across a
  fault: an acknowledged delete is durable.
* **id_reuse** -- one message id acknowledged for two different messages (not
  copies under one dedup id): the later write overwrote the earlier. Must be 0.
* **order_violations** -- within a message group, a message delivered before
  an earlier message of the group (acknowledged before the later one was
  sent) had even been asked to be deleted. Must be 0.
* **dedup_violations** -- acknowledged enqueues with the same dedup id that
  were stored as different messages. Must be 0.
* **batch_violations** -- batches that completed other than exactly once
  (see :func:`check_batches`). Must be 0. ``batches`` counts the
  batches that were due to complete (closed, every item's message
  acknowledged and deleted), ``batches_completed`` those seen complete.

Judging only reads the history (what it sorts are lists of its own), so one
history may be checked again, or dumped, afterwards.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import Counter, defaultdict
from collections.abc import Mapping, Set
from dataclasses import asdict, dataclass, field
from typing import Any

from dynaq.core.receipts import decode_receipt
from dynaq.errors import DynaqError
from dynaq.testing.history import Delivery, Enqueue, Fault, History, TrackedBatch


@dataclass
class Verdict:
    """What a history proves. :attr:`ok` when every must-be-zero figure is zero."""

    acked: int = 0
    unacked_sent: int = 0
    """Enqueues that failed or whose answer was lost (they may or may not exist)."""
    delivered: int = 0
    lost: int = 0
    duplicates: int = 0
    duplicate_causes: dict[str, int] = field(default_factory=dict)
    order_violations: int = 0
    dedup_violations: int = 0
    batches: int = 0
    """Batches due to complete: closed, and every item's message acknowledged and deleted."""
    batches_completed: int = 0
    """Of those, how many were seen complete exactly once."""
    batch_violations: int = 0
    id_reuse: int = 0
    faults: int = 0
    examples: dict[str, list[Any]] = field(default_factory=dict)
    """A few offending tokens per kind of violation, for the failure message."""

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.order_violations
            or self.dedup_violations
            or self.batch_violations
            or self.id_reuse
            or self.duplicate_causes.get("unexplained", 0)
        )

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        return out

    def figures(self) -> dict[str, Any]:
        """The counts a fault run or soak reports (no examples)."""
        out = self.as_dict()
        out.pop("examples")
        return out


def _example(v: Verdict, kind: str, item: Any) -> None:
    bucket = v.examples.setdefault(kind, [])
    if len(bucket) < 5:
        bucket.append(item)


_SLACK = 0.9
"""Share of a visibility timeout after which a redelivery counts as possibly expired
(the node's clock and the workload's run at the same rate, but not in lockstep)."""


def _duplicate_cause(first: Delivery, second: Delivery, faults: list[Fault]) -> str:
    """Why ``second`` (a later delivery of the same token) could legally happen."""
    if first.message_id != second.message_id:
        return "resent"  # two stored messages: a send whose answer was lost, sent again
    # The earliest the first lock could expire: the receive was served after it was sent.
    expired = second.received >= first.invoked + first.visibility_timeout_s * _SLACK
    if first.delete_invoked is None or first.delete_outcome != "ok":
        # Never deleted, or the delete's answer was lost: redelivery is allowed
        # once the visibility timeout has passed (or a node holding it died).
        if any(_between(f, first.received, second.received) for f in faults):
            return "node_fault"
        if expired:
            return "delete_unacknowledged" if first.delete_invoked else "visibility_expiry"
        return "unexplained"
    acked = first.delete_completed
    if acked is not None and second.invoked > acked:
        return "unexplained"  # asked for after the delete was acknowledged: it is durable
    if expired:
        return "visibility_expiry"  # deleted too late: it was visible again meanwhile
    if any(_between(f, first.invoked, second.received) for f in faults):
        return "node_fault"
    return "unexplained"


def _between(f: Fault, lo: float, hi: float) -> bool:
    if not f.explains_redelivery:
        return False
    end = f.ended if f.ended is not None else f.started
    return f.started <= hi and end + 2.0 >= lo


def check(history: History) -> Verdict:
    """Read a finished history (consumers drained the queue) and judge it."""
    v = Verdict(faults=len(history.faults))
    by_token = deliveries_by_token(history)
    v.delivered = len(by_token)
    acked = [e for e in history.enqueues if e.outcome == "ok"]
    acked_tokens = {e.token for e in acked}
    v.acked = len(acked_tokens)
    v.unacked_sent = len({e.token for e in history.enqueues} - acked_tokens)

    # Lost: acknowledged, never delivered. A dedup hit shares its first copy's
    # message, so a token also counts as delivered when its message was
    # delivered under another token with the same dedup id (never merely
    # because its id was delivered: a reused id carries another body).
    dedup_of = {e.token: e.dedup_id for e in history.enqueues if e.dedup_id is not None}
    tokens_by_id: dict[int, set[str]] = defaultdict(set)
    for d in history.deliveries:
        tokens_by_id[d.message_id].add(d.token)

    def delivered(e: Enqueue) -> bool:
        if e.token in by_token:
            return True
        if e.dedup_id is None or e.message_id is None:
            return False
        return any(dedup_of.get(t) == e.dedup_id for t in tokens_by_id.get(e.message_id, ()))

    lost = {e.token for e in acked if not delivered(e)}
    v.lost = len(lost)
    for token in sorted(lost)[:5]:
        _example(v, "lost", token)

    # Id reuse: one id acknowledged for messages that are not dedup copies of each other.
    acked_by_id: dict[int, set[str]] = defaultdict(set)
    for e in acked:
        if e.message_id is not None:
            acked_by_id[e.message_id].add(e.dedup_id if e.dedup_id is not None else e.token)
    for mid, owners in acked_by_id.items():
        if len(owners) > 1:
            v.id_reuse += len(owners) - 1
            _example(v, "id_reuse", [mid, sorted(owners)])

    # Duplicates, with their causes.
    causes: Counter[str] = Counter()
    for token, ds in by_token.items():
        ds.sort(key=lambda d: d.received)
        for first, second in itertools.pairwise(ds):
            cause = _duplicate_cause(first, second, history.faults)
            causes[cause] += 1
            if cause == "unexplained":
                _example(v, "unexplained_duplicate", token)
    v.duplicates = sum(causes.values())
    v.duplicate_causes = dict(causes)

    # Dedup: acknowledged copies of one dedup id must share one message id.
    ids_by_dedup: dict[str, set[int]] = defaultdict(set)
    for e in acked:
        if e.dedup_id is not None and e.message_id is not None:
            ids_by_dedup[e.dedup_id].add(e.message_id)
    for dedup_id, ids in ids_by_dedup.items():
        if len(ids) > 1:
            v.dedup_violations += len(ids) - 1
            _example(v, "dedup", dedup_id)

    # Group order: if j was acknowledged before k was sent (same group), k may
    # be delivered only after j's delete was asked for.
    # A message is its token: a dedup retry is the same message sent again, so
    # it was sent when its first copy was and acknowledged when any copy was.
    first_delivery = {t: ds[0] for t, ds in by_token.items()}
    sent_at: dict[str, float] = {}
    acked_at: dict[str, float] = {}
    for e in history.enqueues:
        sent_at[e.token] = min(sent_at.get(e.token, e.invoked), e.invoked)
        if e.outcome == "ok" and e.completed is not None:
            acked_at[e.token] = min(acked_at.get(e.token, e.completed), e.completed)
    groups: dict[str, set[str]] = defaultdict(set)
    for e in acked:
        if e.group is not None:
            groups[e.group].add(e.token)
    for tokens in groups.values():
        members = sorted(tokens, key=lambda t: sent_at[t])
        for i, k in enumerate(members):
            dk = first_delivery.get(k)
            if dk is None:
                continue
            for j in members[:i]:
                if acked_at[j] >= sent_at[k]:
                    continue  # concurrent sends: no order between them
                deletes = [d.delete_invoked for d in by_token.get(j, ()) if d.delete_invoked]
                if not deletes or min(deletes) > dk.received:
                    v.order_violations += 1
                    _example(v, "order", [j, k])

    check_batches(history, v, by_token, acked_tokens)
    return v


def batch_due(b: TrackedBatch, by_token: Mapping[str, list[Delivery]]) -> bool:
    """Whether ``b`` must be complete: its close was acknowledged and every item's
    message was deleted with an acknowledged delete (which acks the item first)."""
    return b.closed == "ok" and all(
        any(d.delete_outcome == "ok" for d in by_token.get(t, ())) for t in b.tokens
    )


def deliveries_by_token(history: History) -> dict[str, list[Delivery]]:
    by_token: dict[str, list[Delivery]] = defaultdict(list)
    for d in history.deliveries:
        by_token[d.token].append(d)
    return by_token


def check_batches(
    history: History,
    v: Verdict,
    by_token: Mapping[str, list[Delivery]],
    acked_tokens: Set[str],
) -> None:
    """Every batch due to complete completes exactly once; no batch completes early.

    A batch is due when its close was acknowledged and every item's message
    was deleted with an acknowledged delete (which acks the item first). Due:
    the status read after the drain must say complete and, when the completion
    topic was read, exactly one distinct completion event must have arrived.
    Any batch: never two events, and never complete while one of its messages
    had not even been asked to be deleted (a close that answered complete must
    come after a delete of every item was sent).
    """
    for b in history.batches.values():
        deliveries = [by_token.get(t, []) for t in b.tokens]
        due = batch_due(b, by_token)
        seen = bool(b.status_complete or b.close_said_complete)
        events = history.completions.get(b.batch_id, 0)
        problem = ""
        if events > 1:
            problem = f"{events} completion events"
        elif due and not seen:
            problem = "due but not complete after the drain"
        elif due and history.completion_events and events == 0:
            problem = "complete but no completion event"
        elif seen or events:
            asked = [
                min((d.delete_invoked for d in ds if d.delete_invoked), default=None)
                for ds in deliveries
            ]
            if any(a is None for a in asked):
                problem = "complete while an item's message was never deleted"
            elif (
                b.close_said_complete
                and b.closed_at is not None
                and any(a is not None and a > b.closed_at for a in asked)
            ):
                problem = "close answered complete before every item's delete was sent"
        v.batches += due
        if problem:
            v.batch_violations += 1
            _example(v, "batch", [b.batch_id, problem, sorted(set(b.tokens) - acked_tokens)[:3]])
        elif due:
            v.batches_completed += 1


def timeline(history: History, tokens: Set[str]) -> str:
    """The deliveries of ``tokens`` and the faults, on the run's own clock (seconds
    from its first enqueue): what a failed check prints so a run on another
    machine can be read without its history file. ``server`` is the delivery
    number's random prefix, one per node process whose in-flight table served it."""
    t0 = min((e.invoked for e in history.enqueues), default=0.0)
    lines = [
        f"fault {f.kind} {f.detail}: {f.started - t0:.2f}..{(f.ended or f.started) - t0:.2f}"
        for f in history.faults
    ]
    for d in sorted(
        (d for d in history.deliveries if d.token in tokens), key=lambda d: (d.token, d.received)
    ):
        server = "?"
        if d.receipt is not None:
            with contextlib.suppress(DynaqError):
                server = f"{decode_receipt(d.receipt)[1] >> 20:x}"
        deleted = "-" if d.delete_invoked is None else f"{d.delete_invoked - t0:.2f}"
        lines.append(
            f"{d.token} id={d.message_id} asked={d.invoked - t0:.2f} got={d.received - t0:.2f}"
            f" count={d.receive_count} server={server} delete={deleted}:{d.delete_outcome}"
        )
    return "\n".join(lines)
