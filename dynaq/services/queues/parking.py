"""In-flight state kept across a graceful restart of a node that has no one to hand it to.

A node leaving a ring hands its in-flight messages to the next owners
(:meth:`~dynaq.services.queues.handover.HintRouter.handover`). A node alone
(an embedded store, one worker: the common deployment) has no peer, and its
in-flight table lives in memory: every deploy used to serve each message in
flight again at once, its consumer still working on it, with its receive count
started over, so a poison message got up to ``max_receive_count`` more
deliveries per restart before it was dead-lettered.

On a graceful stop such a node now parks its table in the store, one record
per queue (:func:`park`): each message's deadline as wall-clock time, receive
count, group, attributes, first receive and delivery number. The next start
takes it back before serving anything (:func:`restore`) and removes it: the
messages stay invisible until their deadlines, counts go on, and receipts
handed out before the restart still delete and change visibility. A deadline
is kept within 0..12 h of the restart's wall clock (a clock stepped while the
node was down cannot hide a message for longer than a visibility timeout can).
After ``kill -9`` nothing was parked: in-flight messages are served again at
once and counts start over, as before (the README says so).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import msgpack

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.errors import DynaqError
from dynaq.services.catalog import Catalog
from dynaq.services.queue_records import MAX_VISIBILITY_S
from dynaq.services.queues.state import QueueStates
from dynaq.storage.base import Delete, Put, Store, prefix_end

log = logging.getLogger(__name__)

PARKED = keys.PARKED_INFLIGHT
_VERSION = 1


async def park(
    store: Store,
    catalog: Catalog,
    states: QueueStates,
    clock: Clock,
    node: str,
    keep: Callable[[int], bool] | None = None,
) -> int:
    """Write every queue's in-flight table (the messages ``keep`` keeps, if given) to
    the store, one record per queue and ``node`` (members of a ring stopped at once
    each park theirs); return how many messages."""
    now, wall = clock.monotonic(), clock.wall_ms()
    ops: list[Put | Delete] = []
    parked = 0
    for name in catalog.queue_names():
        info = catalog.cached_queue(name)
        st = states.get(info.number) if info is not None else None
        if info is None or st is None or not st.inflight:
            continue
        rows = [
            [
                mid,
                wall + int((f.deadline - now) * 1000),
                f.receive_count,
                f.group,
                f.attributes,
                f.first_received_ms,
                f.delivery,
            ]
            for mid, f in st.inflight.items()
            if keep is None or keep(mid)
        ]
        if not rows:
            continue
        ops.append(Put(PARKED + info.number.to_bytes(4, "big") + node.encode(), _pack(rows)))
        parked += len(rows)
    if ops:
        await store.write_batch(ops)
        log.info("in-flight messages parked for the next start", extra={"messages": parked})
    return parked


async def park_unless_down(
    store: Store,
    catalog: Catalog,
    states: QueueStates,
    clock: Clock,
    node: str,
    keep: Callable[[int], bool] | None = None,
) -> None:
    """:func:`park`, unless the store is down (or closed): then the stop goes on, and
    the messages are served again at once at the next start, as after ``kill -9``."""
    try:
        await park(store, catalog, states, clock, node, keep)
    except DynaqError:
        log.warning("in-flight state not parked", exc_info=True)


async def restore(store: Store, catalog: Catalog, states: QueueStates, clock: Clock) -> int:
    """Take back what :func:`park` wrote (then remove it); return how many messages."""
    rows = await store.scan(PARKED, prefix_end(PARKED), 100_000)
    if not rows:
        return 0
    now, wall = clock.monotonic(), clock.wall_ms()
    by_number = {
        info.number: info
        for info in map(catalog.cached_queue, catalog.queue_names())
        if info is not None
    }
    restored = 0
    for key, value in rows:
        # The queue's number, then the node that parked it (none in older records).
        info = by_number.get(int.from_bytes(key[len(PARKED) : len(PARKED) + 4], "big"))
        entries = _unpack(value)
        if info is None or entries is None:
            continue  # the queue is gone (or was made again: another number)
        st = states.state(info)
        for mid, deadline_ms, count, group, attributes, first_ms, delivery in entries:
            if mid in st.inflight:
                continue  # parked twice (by two members): the first record decides
            left = min(max((deadline_ms - wall) / 1000, 0.0), float(MAX_VISIBILITY_S))
            f = st.mark_served(mid, now, left, group, attributes)
            f.receive_count = max(f.receive_count, count)
            f.first_received_ms = first_ms
            f.delivery = delivery
            restored += 1
    await store.write_batch([Delete(key) for key, _ in rows])
    log.info("in-flight messages taken back after a restart", extra={"messages": restored})
    return restored


def _pack(rows: list[list[Any]]) -> bytes:
    packed: bytes = msgpack.packb([_VERSION, rows])
    return packed


def _unpack(value: bytes) -> list[list[Any]] | None:
    try:
        version, rows = msgpack.unpackb(value)
    except (ValueError, TypeError):
        return None
    return rows if version == _VERSION and isinstance(rows, list) else None
