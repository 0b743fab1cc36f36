"""Per-queue serving state and depth counters on this node."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from dynaq.clock import Clock
from dynaq.core.ids import lane_of
from dynaq.core.keyspace import LaneRange
from dynaq.core.membership import MembershipView
from dynaq.core.partitions import QueueState
from dynaq.services.catalog import Catalog, QueueInfo
from dynaq.services.queue_records import check_visibility


class QueueStates:
    """One :class:`QueueState` per queue this node serves, and each queue's depth.

    ``depth`` is exact on a single node (every write goes through it); in a
    cluster each node counts only what passed through it.
    """

    def __init__(self, view: MembershipView, clock: Clock) -> None:
        self._view = view
        self._clock = clock
        self._states: dict[int, QueueState] = {}
        self._depth: dict[int, int] = {}

    def state(self, info: QueueInfo) -> QueueState:
        """The queue's serving state, created on first use."""
        st = self._states.get(info.number)
        if st is None:
            st = QueueState(
                self._view.my_slice, info.settings.min_partitions, self._clock.monotonic()
            )
            self._states[info.number] = st
        return st

    def get(self, number: int) -> QueueState | None:
        """The queue's serving state if it has any yet."""
        return self._states.get(number)

    def __iter__(self) -> Iterator[QueueState]:
        return iter(self._states.values())

    def forget(self, number: int) -> None:
        """Drop everything known about a queue number (deleted or re-created)."""
        self._states.pop(number, None)
        self._depth.pop(number, None)

    def relayout(self) -> None:
        """The ring changed: recut every queue's partitions to this node's new slice."""
        now = self._clock.monotonic()
        mine = self._view.my_slice
        for st in self._states.values():
            st.relayout(mine, st.count, now)
            st.drop_outside(mine)

    def fit_partitions(self, info: QueueInfo) -> None:
        """The queue's partition limits changed: cut its partitions into them now (a
        receive would, lazily; the count is shown to operators meanwhile)."""
        st = self._states.get(info.number)
        if st is None:
            return
        s = info.settings
        target = min(max(st.count, s.min_partitions), s.max_partitions)
        if target != st.count:
            st.relayout(self._view.my_slice, target, self._clock.monotonic())

    # depth ----------------------------------------------------------------

    def depth(self, number: int) -> int:
        return self._depth.get(number, 0)

    def has_depth(self, number: int) -> bool:
        return number in self._depth

    def set_depth(self, number: int, value: int) -> None:
        self._depth[number] = value

    def add_depth(self, number: int, n: int) -> None:
        """Count ``n`` messages added (negative: removed); never below zero."""
        self._depth[number] = max(0, self._depth.get(number, 0) + n)

    def partition_ranges(self, info: QueueInfo) -> list[LaneRange]:
        return [p.lanes for p in self.state(info).partitions]

    def gauges(self, catalog: Catalog) -> dict[str, float]:
        """statsd gauges: exact depth, and what the last scans saw (approximate depth)."""
        out: dict[str, float] = {}
        for name in catalog.queue_names():
            info = catalog.cached_queue(name)
            if info is None:
                continue
            out[f"{name}.depth.count"] = self._depth.get(info.number, 0)
            st = self._states.get(info.number)
            if st is not None:
                seen = sum(max(p.last_pass_count, p.pass_count) for p in st.partitions)
                out[f"{name}.approximate_depth.count"] = seen
        return out

    def change_visibility(
        self, info: QueueInfo, ids: Iterable[int], visibility_timeout_s: float
    ) -> list[int]:
        """Extend or release ids in flight on this node (never forwarded); return those
        that were in flight."""
        check_visibility(visibility_timeout_s)
        st = self._states.get(info.number)
        if st is None:
            return []
        now = self._clock.monotonic()
        changed = [i for i in ids if st.set_visibility(i, now, visibility_timeout_s)]
        if visibility_timeout_s == 0:
            for i in changed:
                st.poke(lane_of(i))
        return changed
