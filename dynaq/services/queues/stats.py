"""Queue statistics of this node's slice, the parts a ring-wide figure is summed from.

Each node counts what it owns: the messages stored in its slice's lanes (a
key count, capped at :data:`COUNT_CAP` so a deep backlog costs a bounded read;
``capped`` says the figure is a floor), those of them in flight here, the
delayed messages waiting for its slice, the messages it dead-lettered since it
started, and the oldest message's enqueue time (one short read per lane: ids
carry their time and sort by it within a lane). Figures are cached for
:data:`CACHE_S`; ``computed_ms`` says when they were taken.
"""

from __future__ import annotations

from dataclasses import dataclass

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.ids import enqueued_ms, lane_of, lane_start
from dynaq.core.membership import MembershipView
from dynaq.services.catalog import QueueInfo
from dynaq.services.queues.state import QueueStates
from dynaq.storage.base import Store

COUNT_CAP = 100_000
CACHE_S = 2.0
_PAGE = 10_000


@dataclass(frozen=True, slots=True)
class SliceStats:
    """One node's figures for one queue (see the module docstring)."""

    stored: int
    in_flight: int
    delayed: int
    dead_lettered: int
    oldest_ms: int | None
    computed_ms: int
    capped: bool = False

    def to_wire(self) -> dict[str, int | bool | None]:
        return {
            "stored": self.stored,
            "in_flight": self.in_flight,
            "delayed": self.delayed,
            "dead_lettered": self.dead_lettered,
            "oldest_ms": self.oldest_ms,
            "computed_ms": self.computed_ms,
            "capped": self.capped,
        }

    @classmethod
    def from_wire(cls, d: dict[str, object]) -> SliceStats:
        oldest = d.get("oldest_ms")
        return cls(
            int(d["stored"]),  # type: ignore[call-overload]
            int(d["in_flight"]),  # type: ignore[call-overload]
            int(d["delayed"]),  # type: ignore[call-overload]
            int(d["dead_lettered"]),  # type: ignore[call-overload]
            None if oldest is None else int(oldest),  # type: ignore[call-overload]
            int(d["computed_ms"]),  # type: ignore[call-overload]
            bool(d.get("capped", False)),
        )


class SliceStatistics:
    """Computes (and briefly caches) this node's :class:`SliceStats` per queue."""

    def __init__(
        self, store: Store, clock: Clock, view: MembershipView, states: QueueStates
    ) -> None:
        self._store = store
        self._clock = clock
        self._view = view
        self._states = states
        self._cache: dict[int, tuple[float, SliceStats]] = {}
        self.dead_lettered: dict[int, int] = {}
        """Messages dead-lettered from each queue by this node since it started (the
        :class:`~dynaq.services.queues.dead_letters.DeadLetters` count, shared)."""

    async def of(self, info: QueueInfo) -> SliceStats:
        now = self._clock.monotonic()
        hit = self._cache.get(info.number)
        if hit is not None and now - hit[0] < CACHE_S:
            return hit[1]
        mine = self._view.my_slice
        stored, capped = await self._count(info, mine.bottom_id, mine.top_id)
        st = self._states.get(info.number)
        in_flight = 0
        if st is not None:
            in_flight = sum(1 for f in st.inflight.values() if f.deadline > now)
        oldest: int | None = None
        for lane in range(mine.lo, mine.hi):
            start = keys.message(info.number, lane_start(lane))
            rows = await self._store.scan(start, keys.message(info.number, lane_start(lane + 1)), 1)
            if rows:
                t = enqueued_ms(keys.message_id(rows[0][0]))
                oldest = t if oldest is None else min(oldest, t)
        stats = SliceStats(
            stored,
            in_flight,
            await self._delayed(info, mine.lo, mine.hi),
            self.dead_lettered.get(info.number, 0),
            oldest,
            self._clock.wall_ms(),
            capped,
        )
        self._cache[info.number] = (now, stats)
        return stats

    async def _count(self, info: QueueInfo, bottom: int, top: int) -> tuple[int, bool]:
        prefix = keys.queue_messages(info.number)[0]
        end = keys.message(info.number, top)
        after: bytes | None = keys.message(info.number, bottom - 1) if bottom else None
        n = 0
        while n < COUNT_CAP:
            page = await self._store.list_keys(prefix, _PAGE, after)
            inside = [k for k in page if k <= end]
            n += len(inside)
            if len(inside) < len(page) or len(page) < _PAGE:
                return n, False
            after = page[-1]
        return n, True

    async def _delayed(self, info: QueueInfo, lo: int, hi: int) -> int:
        start, end = keys.DELAYED, keys.DELAYED + b"\xff"
        n = seen = 0
        while seen < COUNT_CAP:
            rows = await self._store.scan(start, end, _PAGE)
            for k, _ in rows:
                _, number, mid = keys.delayed_fields(k)
                if number == info.number and lo <= lane_of(mid) < hi:
                    n += 1
            seen += len(rows)
            if len(rows) < _PAGE:
                break
            start = rows[-1][0] + b"\x00"
        return n
