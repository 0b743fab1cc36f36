"""Probing a lane's start before serving a group message found mid-lane (see
:meth:`dynaq.services.queues.receive.Receiver`'s partition scan and :func:`probe_lane`)."""

from __future__ import annotations

from dataclasses import dataclass

from dynaq.core import keys
from dynaq.core.ids import lane_start
from dynaq.core.messages import decode
from dynaq.core.partitions import QueueState
from dynaq.storage.base import Store

PROBE_ROWS = 1024
"""Rows a probe of a lane's start reads; past that every group found there waits
for a scan that reads the lane from its start."""


@dataclass(frozen=True, slots=True)
class LaneProbe:
    """What a probe of a lane's start found: the groups with a message there not
    yet served, and whether it read the whole range (else every group waits)."""

    groups: frozenset[str]
    complete: bool
    rows: int

    def blocks(self, group: str) -> bool:
        return not self.complete or group in self.groups


async def probe_lane(
    store: Store, queue_number: int, st: QueueState, lane: int, before: int
) -> LaneProbe:
    """Read ``lane`` from its start up to ``before`` again, after a scan page
    (starting at ``before``) returned a group message of that lane.

    Why: a page read sees the lane's start only if it began there. A scan
    that began mid-lane may have read the lane's start earlier, before a
    group's first message was committed behind its cursor; a later message of
    the group, sent after the first was acknowledged, would then be served
    first. Hints rewind scans over such writes, but a hint can be late (it
    may reach a node after the next write) or lost during a slice change.
    The first message was committed before the later one was written, so a
    read begun after the page saw the later one sees it: a group with a
    message here that is not served yet waits, and the next scan reads the
    lane from its start."""
    token = st.begin_read()
    try:
        rows = await store.scan(
            keys.message(queue_number, lane_start(lane)),
            keys.message(queue_number, before),
            PROBE_ROWS,
        )
    finally:
        st.end_read(token)
    groups: set[str] = set()
    for k, v in rows:
        mid = keys.message_id(k)
        if st.deleted_since(mid, token):
            continue
        f = st.inflight.get(mid)
        g = f.group if f is not None else decode(mid, v).group
        if g is not None:
            groups.add(g)
    return LaneProbe(frozenset(groups), len(rows) < PROBE_ROWS, len(rows))
