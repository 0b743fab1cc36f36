"""Serving in-flight messages whose visibility ran out, before any scan.

They come off the queue state's deadline heap, oldest deadline first, so an
expired message is visible again without rescanning its partition. One over
its queue's receive limit is held for the dead-letter move instead; one whose
group has an earlier (or a still invisible) message in flight waits its turn
(see :mod:`.receive_request`).
"""

from __future__ import annotations

from collections.abc import Callable

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.ids import lane_of
from dynaq.core.messages import Message, decode
from dynaq.core.partitions import QueueState
from dynaq.services.catalog import QueueInfo
from dynaq.services.queues.receive_budget import ReceiveBudget
from dynaq.services.queues.receive_request import ReceiveTake
from dynaq.storage.base import Store

DEAD_LETTER_HOLD_S = 30.0
"""How long a message chosen for dead-lettering stays invisible while it moves."""


async def serve_expired(
    store: Store,
    clock: Clock,
    info: QueueInfo,
    st: QueueState,
    want: int,
    vt: float,
    limit: int | None,
    doomed: list[tuple[int, bytes]],
    budget: ReceiveBudget,
    take: ReceiveTake,
    serving: Callable[[], bool] = lambda: True,
) -> list[Message]:
    """Serve up to ``want`` expired in-flight messages. Nothing is served once
    ``serving()`` turns false during the read (a drain began: the node's in-flight
    table was handed over to the next owners), nor a message whose entry was
    forgotten during it (its lane moved away, or it was deleted or purged)."""
    now = clock.monotonic()
    # An entry of a lane this node does not serve (handed over early by a member that
    # saw a ring change first, or restored from a parked table) is its owner's to serve.
    expired = [m for m in st.expired(now, budget.rows(want)) if lane_of(m) in st.slice]
    if not expired:
        return []
    token = st.begin_read()
    try:
        items = await store.get_many([keys.message(info.number, m) for m in expired])
    except BaseException:
        # A failed read (or a cancelled receive) serves none of them: back on
        # the heap, so the next receive serves them at once, not a scan later.
        st.requeue_expired(expired)
        raise
    finally:
        st.end_read(token)
    if not serving():
        st.requeue_expired(expired)
        return []
    now, wall_ms = clock.monotonic(), clock.wall_ms()
    out: list[Message] = []
    for n, (mid, item) in enumerate(zip(expired, items, strict=True)):
        if budget.spent:
            # Not taken: back on the heap, first in line for the next receive.
            st.requeue_expired(expired[n:])
            break
        if item is None or st.deleted_since(mid, token):
            st.forget(mid)  # deleted through another node
        elif st.is_invisible(mid, now):
            continue  # a concurrent receive took it first
        elif mid not in st.inflight:
            # Forgotten during the read: its lane moved to another member (which
            # holds its in-flight state now), or a purge or a delete elsewhere took it.
            continue
        elif limit is not None and _over_limit(st, mid, limit):
            st.hold(mid, now, DEAD_LETTER_HOLD_S)
            doomed.append((mid, item.value))
        elif (g := _group_of(st, mid)) is not None and (
            take.group_full(g) or st.group_blocked(g, mid, now, take.ids)
        ):
            st.requeue_expired([mid])  # an earlier one of its group goes first
        else:
            msg = decode(mid, item.value)
            f = st.mark_served(mid, now, vt, msg.group, msg.attributes, wall_ms)
            msg.receive_count, msg.delivery = f.receive_count, f.delivery
            msg.first_received_ms = f.first_received_ms
            out.append(msg)
            if g is not None or vt <= 0:
                take.took(mid, g)
            budget.take(len(item.value))
    return out


def _group_of(st: QueueState, message_id: int) -> str | None:
    f = st.inflight.get(message_id)
    return None if f is None else f.group


def _over_limit(st: QueueState, message_id: int, limit: int) -> bool:
    """Whether the message was served ``limit`` times already (its next serve is one too many)."""
    f = st.inflight.get(message_id)
    return f is not None and f.receive_count >= limit
