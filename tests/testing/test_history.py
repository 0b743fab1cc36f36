"""The history checker's verdicts on small hand-made histories (no server needed)."""

from __future__ import annotations

from dynaq.testing.history import Delivery, Enqueue, Fault, History, TrackedBatch
from dynaq.testing.verdict import check

VT = 5.0


def _acked(h: History, token: str, mid: int, at: float = 0.0, dedup: str | None = None) -> Enqueue:
    e = Enqueue(token, at, dedup_id=dedup, completed=at + 0.01, outcome="ok", message_id=mid)
    h.enqueues.append(e)
    return e


def _delivery(
    token: str,
    mid: int,
    invoked: float,
    received: float,
    deleted: tuple[float, float] | None = None,
    outcome: str = "ok",
) -> Delivery:
    d = Delivery(token, mid, received, invoked, VT)
    if deleted is not None:
        d.delete_invoked, d.delete_completed = deleted
        d.delete_outcome = outcome  # type: ignore[assignment]
    return d


def test_a_reused_id_is_loss_and_id_reuse_not_a_delivery() -> None:
    h = History()
    _acked(h, "a", 7)
    _acked(h, "b", 7, at=1.0)  # the second write overwrote the first
    h.deliveries.append(_delivery("b", 7, 2.0, 2.1, (2.2, 2.3)))
    v = check(h)
    assert v.lost == 1 and v.examples["lost"] == ["a"]
    assert v.id_reuse == 1 and not v.ok


def test_dedup_copies_share_an_id_without_reuse_or_loss() -> None:
    h = History()
    _acked(h, "a", 7, dedup="k")
    _acked(h, "a2", 7, at=0.5, dedup="k")  # a retry under the same dedup id
    h.deliveries.append(_delivery("a", 7, 1.0, 1.1, (1.2, 1.3)))
    v = check(h)
    assert v.lost == 0 and v.id_reuse == 0 and v.ok


def test_a_long_poll_that_waited_for_the_expiry_is_explained() -> None:
    h = History()
    _acked(h, "a", 7)
    # Never deleted; the second receive was sent before the timeout passed and
    # answered once it had (the long poll waited for it).
    h.deliveries += [_delivery("a", 7, 1.0, 1.1), _delivery("a", 7, 5.3, 6.1, (6.2, 6.3))]
    v = check(h)
    assert v.duplicate_causes == {"visibility_expiry": 1}, v
    assert v.ok


def test_redelivery_after_an_acknowledged_delete_is_unexplained_even_after_a_fault() -> None:
    h = History()
    _acked(h, "a", 7)
    h.deliveries += [
        _delivery("a", 7, 1.0, 1.1, (1.2, 1.3)),
        _delivery("a", 7, 2.0, 2.1, (2.2, 2.3)),
    ]
    h.faults.append(Fault("kill", 1.5, 1.8))
    v = check(h)
    assert v.duplicate_causes == {"unexplained": 1} and not v.ok


def test_redelivery_racing_a_delete_during_a_fault_is_a_node_fault() -> None:
    h = History()
    _acked(h, "a", 7)
    h.deliveries += [
        _delivery("a", 7, 1.0, 1.1, (1.2, 2.5)),  # the delete took long: a node died
        _delivery("a", 7, 2.0, 2.1, (2.6, 2.7)),
    ]
    h.faults.append(Fault("kill", 1.5, 1.8))
    assert check(h).duplicate_causes == {"node_fault": 1}


def test_the_same_token_stored_twice_is_resent() -> None:
    h = History()
    h.enqueues.append(Enqueue("a", 0.0, dedup_id="a", completed=5.0, outcome="unknown"))
    _acked(h, "a", 8, at=5.0, dedup="a")
    h.deliveries += [
        _delivery("a", 7, 6.0, 6.1, (6.2, 6.3)),
        _delivery("a", 8, 6.0, 6.1, (6.2, 6.3)),
    ]
    v = check(h)
    assert v.duplicate_causes == {"resent": 1} and v.ok


def _batch_history(events: int | None, complete: bool, *, delete_b: bool = True) -> History:
    """Batch 9 of messages a and b, closed at 0.5; both delivered and (b maybe) deleted."""
    h = History()
    _acked(h, "a", 7)
    _acked(h, "b", 8)
    h.deliveries.append(_delivery("a", 7, 1.0, 1.1, (1.2, 1.3)))
    h.deliveries.append(_delivery("b", 8, 1.0, 1.1, (1.2, 1.3) if delete_b else None))
    b = TrackedBatch("9", ["a", "b"], 0.0, closed="ok", closed_at=0.5, status_complete=complete)
    h.batches["9"] = b
    if events is not None:
        h.completion_events = True
        if events:
            h.completions["9"] = events
    return h


def test_a_due_batch_completed_once_is_counted() -> None:
    v = check(_batch_history(events=1, complete=True))
    assert (v.batches, v.batches_completed, v.batch_violations) == (1, 1, 0) and v.ok


def test_a_due_batch_never_complete_or_completed_twice_is_a_violation() -> None:
    for events, complete in [(None, False), (0, True), (2, True)]:
        v = check(_batch_history(events=events, complete=complete))
        assert (v.batches, v.batches_completed, v.batch_violations) == (1, 0, 1), v
        assert not v.ok


def test_a_batch_complete_before_every_item_was_deleted_is_a_violation() -> None:
    v = check(_batch_history(events=1, complete=True, delete_b=False))
    assert v.batches == 0 and v.batch_violations == 1 and not v.ok
    assert "never deleted" in v.examples["batch"][0][1]


def test_a_close_that_answered_complete_before_the_deletes_is_a_violation() -> None:
    h = _batch_history(events=None, complete=True)
    h.batches["9"].close_said_complete = True
    h.batches["9"].closed_at = 1.0  # the deletes were sent at 1.2
    v = check(h)
    assert v.batch_violations == 1 and "before every item" in v.examples["batch"][0][1]


def test_a_batch_not_due_may_stay_incomplete() -> None:
    v = check(_batch_history(events=0, complete=False, delete_b=False))
    assert (v.batches, v.batch_violations) == (0, 0) and v.ok


def test_a_fault_that_keeps_locks_does_not_excuse_a_redelivery() -> None:
    h = History()
    _acked(h, "a", 7)
    h.deliveries += [
        _delivery("a", 7, 1.0, 1.1, (1.2, 2.5)),
        _delivery("a", 7, 2.0, 2.1, (2.6, 2.7)),
    ]
    h.faults.append(Fault("clock step", 1.5, 1.8, explains_redelivery=False))
    v = check(h)
    assert v.duplicate_causes == {"unexplained": 1} and not v.ok
