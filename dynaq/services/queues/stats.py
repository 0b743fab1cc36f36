"""Queue statistics: this node's figures for its slice, and their sum over the ring.

Each node counts what it owns: the messages stored in its slice's lanes (a
key count, capped at :data:`COUNT_CAP` so a deep backlog costs a bounded read;
``capped`` says the figure is a floor), those of them in flight here, the
delayed messages waiting for its slice, the messages it dead-lettered since it
started, and the oldest message's enqueue time (one short read per lane: ids
carry their time: the count's own keys give it, or, when the count is capped,
one short read per lane, as ids sort by time within a lane).

The figures are computed in the background, every :data:`REFRESH_S`, for each
queue asked about in the last minute (a count reads many keys: queues nobody
watches cost nothing), never inside a request (a lane-by-lane read is too slow on a remote
store for a GET): a request reads the last figures, whose ``computed_ms`` says
how old they are, and only a queue never computed yet is computed on demand.
The last figures of those queues are also gauges, read at every statsd flush
and Prometheus scrape (``<queue>.slice.visible`` ...; see :meth:`SliceStatistics.gauges`):
summed over the nodes they give the ring's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.ids import enqueued_ms, lane_of, lane_start
from dynaq.core.keyspace import LaneRange
from dynaq.core.membership import Member, MembershipView
from dynaq.metrics import Metrics
from dynaq.services.catalog import QueueInfo
from dynaq.services.queues.state import QueueStates
from dynaq.storage.base import Store
from dynaq.tasks import cancel_and_wait, every

COUNT_CAP = 100_000
REFRESH_S = 5.0
IDLE_REFRESH_S = 60.0
"""A queue nobody asked about for this long is no longer recomputed in the background."""
_PAGE = 10_000
_LANE_READS = 16  # concurrent lane reads per refresh

PeerStats = Callable[[Member, str], Awaitable[dict[str, Any]]]
"""Asks a peer for its :class:`SliceStats` of a queue (wire form)."""


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
    """This node's :class:`SliceStats` per queue, refreshed in the background."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        view: MembershipView,
        states: QueueStates,
        metrics: Metrics,
        queues: Callable[[], Iterable[QueueInfo]],
    ) -> None:
        self._store = store
        self._clock = clock
        self._view = view
        self._states = states
        self._queues = queues
        self._cache: dict[int, SliceStats] = {}
        self._asked: dict[int, float] = {}
        self._task: asyncio.Task[None] | None = None
        self.dead_lettered: dict[int, int] = {}
        """Messages dead-lettered from each queue (by number) by this node since it
        started (the :class:`~dynaq.services.queues.dead_letters.DeadLetters` count)."""
        metrics.add_gauge_provider(self.gauges)

    def start(self) -> None:
        self._task = asyncio.create_task(
            every(REFRESH_S, self.refresh, clock=self._clock, what="queue statistics"),
            name="queue-statistics",
        )

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def refresh(self) -> None:
        """Recompute the figures of every queue watched lately (:meth:`gauges` reads them)."""
        live = {info.number: info for info in self._queues()}
        for number in [n for n in self._cache if n not in live]:
            del self._cache[number]
            self._asked.pop(number, None)
        now = self._clock.monotonic()
        for info in live.values():
            if now - self._asked.get(info.number, float("-inf")) > IDLE_REFRESH_S:
                continue  # nobody is looking: no load on the store (a count reads many keys)
            self._cache[info.number] = await self._compute(info)

    def gauges(self) -> dict[str, float]:
        """This node's last figures of each existing queue watched in the last
        :data:`IDLE_REFRESH_S` (so refreshed every :data:`REFRESH_S`), as gauges
        (``<queue>.slice.visible`` ...), read at every statsd flush and Prometheus
        scrape: a deleted queue's go with it, and each is a figure of the last
        refresh (a purged queue's show it empty from then on: no age for a message
        that is gone), never one left over from an earlier one."""
        out: dict[str, float] = {}
        now = self._clock.monotonic()
        for info in self._queues():
            stats = self._cache.get(info.number)
            if stats is None or now - self._asked.get(info.number, float("-inf")) > IDLE_REFRESH_S:
                continue  # not kept fresh: no figure rather than a stale one
            name = f"{info.name}.slice"
            out[f"{name}.visible"] = max(0, stats.stored - stats.in_flight)
            out[f"{name}.in_flight"] = stats.in_flight
            out[f"{name}.delayed"] = stats.delayed
            oldest = stats.oldest_ms
            age_ms = 0 if oldest is None else max(0, stats.computed_ms - oldest)
            out[f"{name}.oldest_age_s"] = age_ms / 1000  # 0 when empty, as the API says
        return out

    async def of(self, info: QueueInfo) -> SliceStats:
        """The last figures for ``info`` (computed now if there are none yet, or if nobody
        asked for a minute and they are older than :data:`REFRESH_S`)."""
        now = self._clock.monotonic()
        watched = now - self._asked.get(info.number, float("-inf")) <= IDLE_REFRESH_S
        self._asked[info.number] = now
        hit = self._cache.get(info.number)
        stale = hit is not None and self._clock.wall_ms() - hit.computed_ms > REFRESH_S * 1000
        if hit is None or (stale and not watched):
            # First look after a quiet spell: the slow refresh's figures may be a minute
            # old, so compute them now; from here on the 5 s refresh keeps them fresh.
            hit = self._cache[info.number] = await self._compute(info)
        return hit

    async def live(self, info: QueueInfo) -> SliceStats:
        """:meth:`of`, with the in-flight figure read now from the in-memory table: a
        receive answered a moment ago is counted, however old the other figures are
        (what a peer sums over the ring, and what a client checks after receiving)."""
        return replace(await self.of(info), in_flight=self._in_flight_now(info))

    async def ring(
        self,
        info: QueueInfo,
        peers: Sequence[Member],
        ask: PeerStats | None,
        stored: int | None = None,
    ) -> dict[str, Any]:
        """The queue's figures summed over this node and ``peers`` (each node's figures
        are at most ``stats_age_s`` old; a node that does not answer is left out and
        ``stats_nodes`` says how many did). ``stored``: how many messages the whole
        ring stores, where known exactly (the store's count; a lone node's depth),
        in place of the sum of each member's slice."""
        # ``stored``, where given, is live; so is each in-flight figure (live()); the
        # rest as last computed.
        parts = [await self.live(info)]
        if ask is not None and peers:
            answers = await asyncio.gather(
                *(ask(m, info.name) for m in peers), return_exceptions=True
            )
            parts.extend(SliceStats.from_wire(a) for a in answers if isinstance(a, dict))
        now_ms = self._clock.wall_ms()
        oldest = [p.oldest_ms for p in parts if p.oldest_ms is not None]
        in_flight = sum(p.in_flight for p in parts)
        total = sum(p.stored for p in parts) if stored is None else stored
        return {
            "visible": max(0, total - in_flight),
            "in_flight": in_flight,
            "delayed": sum(p.delayed for p in parts),
            "dead_lettered": sum(p.dead_lettered for p in parts),
            "oldest_age_s": 0.0 if not oldest else max(0.0, (now_ms - min(oldest)) / 1000),
            "stats_nodes": len(parts),
            "stats_age_s": max(0.0, max((now_ms - p.computed_ms) / 1000 for p in parts)),
            "stats_capped": stored is None and any(p.capped for p in parts),
        }

    async def ring_partitions(
        self,
        info: QueueInfo,
        mine: Sequence[LaneRange],
        peers: Sequence[Member],
        ask: PeerStats | None,
    ) -> list[tuple[int, int]]:
        """The id ranges (inclusive) of the partitions this node (``mine``) and
        ``peers`` serve the queue from, in id order (on a worker: its node's). A peer
        that does not answer counts as one partition of its slice, so the ranges
        always cover the ring's."""
        out = [(r.bottom_id, r.top_id) for r in mine]
        if ask is None or not peers:
            return out
        answers = await asyncio.gather(*(ask(m, info.name) for m in peers), return_exceptions=True)
        slices = self._view.slices()
        for m, got in zip(peers, answers, strict=True):
            s = slices[m.name]
            try:  # a peer's answer is checked, never trusted into a 500
                listed = got["partitions"] if isinstance(got, dict) else []
                theirs = [(int(lo), int(hi)) for lo, hi in listed]
            except (TypeError, ValueError, LookupError):
                theirs = []
            out.extend(theirs or [(s.bottom_id, s.top_id)])
        return sorted(out)

    def _in_flight_now(self, info: QueueInfo) -> int:
        st = self._states.get(info.number)
        if st is None:
            return 0
        now = self._clock.monotonic()
        return sum(1 for f in st.inflight.values() if f.deadline > now)

    async def _compute(self, info: QueueInfo) -> SliceStats:
        mine = self._view.my_slice
        stored, capped, oldest = await self._count(info, mine.bottom_id, mine.top_id)
        if capped:  # the count stopped early: the oldest may be in a lane it did not reach
            oldest = await self._oldest(info, mine.lo, mine.hi)
        return SliceStats(
            stored,
            self._in_flight_now(info),
            await self._delayed(info, mine.lo, mine.hi),
            self.dead_lettered.get(info.number, 0),
            oldest,
            self._clock.wall_ms(),
            capped,
        )

    async def _oldest(self, info: QueueInfo, lo: int, hi: int) -> int | None:
        gate = asyncio.Semaphore(_LANE_READS)

        async def first(lane: int) -> int | None:
            start = keys.message(info.number, lane_start(lane))
            async with gate:
                rows = await self._store.scan(
                    start, keys.message(info.number, lane_start(lane + 1)), 1
                )
            return enqueued_ms(keys.message_id(rows[0][0])) if rows else None

        found = [t for t in await asyncio.gather(*map(first, range(lo, hi))) if t is not None]
        return min(found) if found else None

    async def _count(self, info: QueueInfo, bottom: int, top: int) -> tuple[int, bool, int | None]:
        """Stored messages in ``[bottom, top]`` (up to :data:`COUNT_CAP`), whether the
        count was capped, and the oldest enqueue time among those counted."""
        prefix = keys.queue_messages(info.number)[0]
        end = keys.message(info.number, top)
        after: bytes | None = keys.message(info.number, bottom - 1) if bottom else None
        n = 0
        oldest: int | None = None
        while n < COUNT_CAP:
            page = await self._store.list_keys(prefix, _PAGE, after)
            inside = [k for k in page if k <= end]
            if inside:
                t = min(enqueued_ms(keys.message_id(k)) for k in inside)
                oldest = t if oldest is None else min(oldest, t)
            n += len(inside)
            if len(inside) < len(page) or len(page) < _PAGE:
                return n, False, oldest
            after = page[-1]
        return n, True, oldest

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
