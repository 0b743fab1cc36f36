"""Dedup ids on one node: which were stored within the window, and the guard that
keeps two writes of one id from both storing a copy.

A write's dedup check (a store read of dedup records) and its write are two
store calls. :meth:`Dedup.guard` serializes the checks per queue; the ids a
write adds stay registered as *in flight* until its write has landed or failed,
and a later check that meets one of them waits for that write, then reads the
store. Writes with distinct ids therefore share one commit instead of queueing
for one each, and a duplicate never stores a second copy while the first is
being written. What a failed write leaves is what the retry's check reads: on
LMDB nothing (a commit is all or nothing); on Cassandra and Riak a failed batch
may be partly applied, or applied later, as before this guard existed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import msgpack

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.messages import NewMessage
from dynaq.services.catalog import QueueInfo
from dynaq.services.queues.dedup_lock import DedupFileLock
from dynaq.storage.base import Store

InFlight = dict[int, dict[str, asyncio.Event]]
"""Per queue number: the dedup ids of writes prepared and not yet landed, each with
the event its write sets when it has landed or failed."""


def dedup_bucket(wall_ms: int, window_s: float) -> int:
    """The time bucket a dedup record written at ``wall_ms`` goes to (one window wide)."""
    return wall_ms // max(1, int(window_s * 1000))


@dataclass(slots=True)
class DedupSeen:
    """One write's dedup check: ids already stored, and how new records are written."""

    known: dict[str, int]
    """Dedup id → the id of the message stored under it within the window."""
    write_prefix: bytes
    """A new record's key is this prefix + the id's UTF-8."""
    expires_ms: int
    """When a record written now leaves the window (the steady wall clock)."""

    def record(self, message_id: int) -> bytes:
        """The value of a new record pointing at ``message_id``."""
        return msgpack.packb([message_id, self.expires_ms])  # type: ignore[no-any-return]


class DedupClaim:
    """The dedup ids one write registered as in flight, and the queue locks it holds
    until :meth:`unlock` (see :meth:`Dedup.guard`)."""

    __slots__ = ("_done", "_held", "_in_flight", "locks")

    def __init__(self, in_flight: InFlight) -> None:
        self._in_flight = in_flight
        self._done = asyncio.Event()
        self._held: list[tuple[int, str]] = []
        self.locks: list[asyncio.Lock] = []

    def register(self, number: int, dedup_id: str) -> None:
        """``dedup_id`` is written into queue ``number`` by this write."""
        self._in_flight.setdefault(number, {})[dedup_id] = self._done
        self._held.append((number, dedup_id))

    def unlock(self) -> None:
        """Let later writes of these queues check their dedup ids (call once prepared,
        before writing); idempotent."""
        for lock in reversed(self.locks):
            lock.release()
        self.locks.clear()

    async def wait_unlocked(self, events: list[asyncio.Event]) -> bool:
        """Wait for ``events`` without holding this claim's locks, if that is safe; then
        take the locks again. False (nothing done) when it is not: a claim that has
        registered ids may be waited on by a holder of its locks (a transaction),
        and taking them back would then wait forever."""
        if self._held or not self.locks:
            return False
        locks = list(self.locks)
        self.unlock()
        for event in events:
            await event.wait()
        for lock in locks:  # the guard's order (sorted by queue number)
            await lock.acquire()
            self.locks.append(lock)
        return True

    def landed(self) -> None:
        """The write ended (stored or not): later checks may read the store now."""
        for number, dedup_id in self._held:
            flying = self._in_flight.get(number)
            if flying is not None and flying.get(dedup_id) is self._done:
                del flying[dedup_id]
                if not flying:
                    del self._in_flight[number]
        self._held.clear()
        self._done.set()


class Dedup:
    """The dedup window of every queue on this node: checks, records and the guard."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        window_s: float,
        across_processes: DedupFileLock | None = None,
    ) -> None:
        """``across_processes``: the node's workers' shared lock (several workers)."""
        self._store = store
        self._clock = clock
        self.window_s = window_s
        self._across = across_processes
        self._locks: dict[int, asyncio.Lock] = {}
        self._in_flight: InFlight = {}

    def forget(self, number: int) -> None:
        """A queue is gone: drop its lock (its in-flight ids leave as their writes land)."""
        lock = self._locks.get(number)
        if lock is not None and not lock.locked():
            del self._locks[number]

    @asynccontextmanager
    async def guard(
        self, infos: Sequence[QueueInfo], messages: Sequence[NewMessage]
    ) -> AsyncIterator[DedupClaim]:
        """Serialize the dedup checks of writes that carry dedup ids, per queue, on
        this node; yield the claim their new ids are registered under.

        The queues' locks are held until the caller calls
        :meth:`DedupClaim.unlock`, after preparing and before writing; a caller
        that never unlocks (a transaction) holds them until its write ends. On
        leaving, the claim's ids leave the in-flight table (the write landed,
        failed or was cancelled). Two racing enqueues with the same id on one
        node never both store a copy, whichever of its workers they reach.
        (Across nodes a race within milliseconds can still enqueue twice:
        documented.) Batches without dedup ids never wait.
        """
        claim = DedupClaim(self._in_flight)
        if all(m.dedup_id is None for m in messages):
            yield claim
            return
        slots: list[int] = []
        if self._across is not None:
            # Another worker of this node may check the same ids: hold their slots
            # from before the check until the write has landed (see dedup_lock).
            ids = [m.dedup_id for m in messages if m.dedup_id is not None]
            slots = sorted({s for i in infos for s in self._across.slots_for(i.number, ids)})
            await self._across.acquire(slots)
        try:
            for number in sorted({i.number for i in infos}):
                lock = self._locks.setdefault(number, asyncio.Lock())
                await lock.acquire()
                claim.locks.append(lock)
            yield claim
        finally:  # stored, failed or cancelled: the ids leave, then the locks
            claim.landed()
            claim.unlock()
            if self._across is not None:
                self._across.release(slots)

    async def check(
        self, number: int, wanted: list[str], claim: DedupClaim | None = None
    ) -> DedupSeen:
        """Which of ``wanted`` were stored within the window (their first message ids),
        and where and how a write records the others. An id held by a write still
        in flight is checked once that write has landed; meanwhile ``claim``'s
        locks are let go when that is safe (:meth:`DedupClaim.wait_unlocked`),
        so one retry waiting out a slow write does not hold up every other
        sender to the queue."""
        await self._wait_in_flight(number, wanted, claim)
        # A dedup window is elapsed time: a wall-clock step must not end or stretch it.
        # Read after the wait, so a record written now lasts the whole window.
        dedup_ms = self._clock.steady_wall_ms()
        bucket = dedup_bucket(dedup_ms, self.window_s)
        self_expiring = self._store.expires_itself(keys.DEDUP)
        # Key prefixes once per write, not once per message (a relay's batch holds
        # a thousand dedup ids).
        if self_expiring:
            write_prefix = keys.dedup_prefix(number)
            lookup_prefixes: tuple[bytes, ...] = (write_prefix,)
        else:
            write_prefix = keys.dedup_bucket_prefix(bucket, number)
            lookup_prefixes = _lookup_prefixes(number, bucket)
        items = await self._store.get_many(
            [p + d.encode() for d in wanted for p in lookup_prefixes]
        )
        per = len(lookup_prefixes)
        known: dict[str, int] = {}
        for i, d in enumerate(wanted):
            for item in items[per * i : per * (i + 1)]:
                if item is not None:
                    mid, expires_ms = msgpack.unpackb(item.value)
                    # A store that expires records itself (Cassandra's TTL) times the
                    # window by one clock; comparing this node's clock with the
                    # writer's would end it early when the two disagree.
                    if expires_ms > dedup_ms or self_expiring:
                        known[d] = int(mid)
                        break
        return DedupSeen(known, write_prefix, dedup_ms + int(self.window_s * 1000))

    async def _wait_in_flight(
        self, number: int, wanted: list[str], claim: DedupClaim | None
    ) -> None:
        """Wait until every write in flight that holds one of ``wanted`` has landed
        or failed: the store read that follows then shows its records, or none."""
        while True:
            flying = self._in_flight.get(number)
            if not flying:
                return
            held = (flying.get(d) for d in wanted)
            events = list({id(e): e for e in held if e is not None}.values())
            if not events:
                return
            if claim is None or not await claim.wait_unlocked(events):
                for event in events:  # no one registers these ids while the locks are held
                    await event.wait()
                return
            # The locks were let go: another write may have taken one of the ids since.


def _lookup_prefixes(number: int, bucket: int) -> tuple[bytes, ...]:
    """Where a record younger than the window may be, on a store that does not expire
    records itself: this bucket or the one before (or, written by an earlier
    release, under the one-key-per-id layout). A self-expiring store (Cassandra's
    TTL) keeps one key per id, written and read under
    :func:`~dynaq.core.keys.dedup_prefix`; elsewhere a record goes to the current
    time bucket, so a whole bucket expires by one range delete."""
    return (
        keys.dedup_bucket_prefix(bucket, number),
        keys.dedup_bucket_prefix(bucket - 1, number),
        keys.dedup_prefix(number),
    )
