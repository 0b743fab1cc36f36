"""Every crash window of exact batch tracking, one injected failure at a time.

A clean run of a batch's life (open, add two blocks, close, ack everything in
three requests; and the same with the close last) counts the store calls it
makes. Then the life is replayed once per call and failure mode (failed
before or after applying, or cancelled before or after applying), with a
client that retries every failed call, followed by the reaper's repair pass.
Each time the batch must end complete, flipped to complete by exactly one
header write, reported to at most one caller, delivered to the listener
(twice only when the failure hit between the delivery and its announcement,
where the topic's dedup id takes the repeat), with no trace left behind.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from dynaq.clock import ManualClock
from dynaq.core import keys
from dynaq.core.batch_items import ItemRef
from dynaq.core.membership import Member, MembershipView
from dynaq.errors import DynaqError
from dynaq.metrics import NullMetrics
from dynaq.services.batches import BLOCK_ITEMS, EXACT, BatchService, Completion
from dynaq.services.batches.records import Block
from dynaq.storage.base import prefix_end
from dynaq.storage.memory import MemoryStore
from tests.services.batch_faults import Fault, FaultyStore, injection_points

T = TypeVar("T")

SETTLE_S = 10.0
SKEW_S = 1.0


class Life:
    """One batch service on a faulty memory store, with a recording listener."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.store = FaultyStore(MemoryStore())
        self.events: list[int] = []
        self.svc = BatchService(
            self.store,
            self.clock,
            MembershipView(Member("n", "x:1")),
            NullMetrics(),
            reap_interval_s=0,
            settle_s=SETTLE_S,
            skew_s=SKEW_S,
        )

        async def listener(done: Completion) -> None:
            self.events.append(done.batch_id)
            self.store.log.append("publish")

        self.svc.on_completion(listener)

    async def retry(self, op: Callable[[], Awaitable[T]]) -> T:
        """What a client does: call again after a failure or a dropped connection."""
        for _ in range(5):
            try:
                return await op()
            except (DynaqError, asyncio.CancelledError):
                await _idle()
        raise AssertionError("an operation kept failing after the fault was spent")

    async def run(self, close_first: bool, sparing: bool = False) -> tuple[int, int]:
        """The batch's life; returns its id and how many calls reported its completion.

        A ``sparing`` client retries a failed ack only with the items whose
        clear did not apply (as if another node had acked the rest; nothing
        retried reaches what the failure interrupted, only the reaper does).
        """
        b = await self.retry(lambda: self.svc.open(EXACT, "k"))
        blocks = await self.retry(lambda: self.svc.add_items(b, BLOCK_ITEMS + 3))
        refs = [ItemRef(b, blk, i) for blk, n in blocks for i in range(n)]
        reported = 0
        if close_first:
            await self.retry(lambda: self.svc.close(b, EXACT))
        for part in (refs[:2000], refs[2000:BLOCK_ITEMS], refs[BLOCK_ITEMS:]):
            reported += await self._ack(part, sparing)
        if not close_first:
            await self.retry(lambda: self.svc.close(b, EXACT))
        return b, reported

    async def _ack(self, refs: list[ItemRef], sparing: bool) -> int:
        for _ in range(5):
            try:
                return len(await self.svc.ack(refs))
            except (DynaqError, asyncio.CancelledError):
                await _idle()
            if sparing:
                refs = await self._unacked(refs)
                if not refs:
                    return 0
        raise AssertionError("an ack kept failing after the fault was spent")

    async def _unacked(self, refs: list[ItemRef]) -> list[ItemRef]:
        blocks: dict[uuid.UUID, int] = {}
        for r in refs:
            if r.block not in blocks:
                item = await self.store.inner.get(keys.batch_block(r.batch_id, r.block.bytes))
                blocks[r.block] = 0 if item is None else Block.decode(item.value).bits
        return [r for r in refs if blocks[r.block] >> r.index & 1]

    async def repair(self) -> None:
        """Let the relay's retries and the reaper's repair pass run, past the grace period."""
        for _ in range(3):
            self.clock.advance(SETTLE_S + SKEW_S + 1)
            await _idle()
            await self.svc.reap_once()
            await _idle()

    async def traces(self) -> list[bytes]:
        """Repair markers and completion records still stored."""
        rows: list[bytes] = []
        for prefix in (keys.BATCH_REPAIR, keys.BATCH_COMPLETION):
            rows += [k for k, _ in await self.store.inner.scan(prefix, prefix_end(prefix), 10)]
        return rows


async def _idle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def _clean_calls(close_first: bool) -> list[Fault]:
    life = Life()
    await life.svc.start()
    try:
        b, reported = await life.run(close_first)
        assert reported == (1 if close_first else 0)
        assert life.store.flips[b] == 1 and life.events == [b]
        assert await life.traces() == []
    finally:
        await life.svc.stop()
    return injection_points(life.store.calls)


@pytest.mark.parametrize("sparing", [False, True], ids=["retry-all", "retry-unapplied"])
@pytest.mark.parametrize(
    "close_first", [True, False], ids=["last-ack-completes", "close-completes"]
)
async def test_every_window_completes_exactly_once(close_first: bool, sparing: bool) -> None:
    points = await _clean_calls(close_first)
    assert len(points) > 100  # the life really goes through the windows
    failures: list[str] = []
    for fault in points:
        life = Life()
        await life.svc.start()
        try:
            life.store.fault = fault
            b, reported = await life.run(close_first, sparing)
            life.store.fault = None
            await life.repair()
            h = await life.svc.get(b)
            log = life.store.log
            # A repeat is allowed only if the fault fell between a delivery and its announcement.
            repeat_ok = "publish" in log and log.index("publish") < log.index("fault") < (
                log.index("announced") if "announced" in log else len(log)
            )
            problems = [
                f"complete={h.complete}" if not h.complete else "",
                f"announced={h.announced}" if not h.announced else "",
                f"pending={h.pending}" if h.pending else "",
                f"adds={len(h.adds)}" if h.adds else "",
                f"retiring={len(h.retiring)}" if h.retiring else "",
                f"flips={life.store.flips[b]}" if life.store.flips[b] != 1 else "",
                f"reported={reported}" if reported > 1 else "",
                f"events={life.events}"
                if set(life.events) != {b} or len(life.events) > (2 if repeat_ok else 1)
                else "",
                f"traces={len(await life.traces())}" if await life.traces() else "",
            ]
            if any(problems):
                failures.append(f"{fault}: {' '.join(p for p in problems if p)}")
        finally:
            await life.svc.stop()
    assert failures == [], "\n".join(failures)
