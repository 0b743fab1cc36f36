"""Which node of a ring serves each stream: its authority, recorded in the shared store,
and the failover that hands a stream to its most complete copy.

A stream's files live on its authority, and copies on its followers
(:mod:`dynaq.streams.replicas`). When a stream is first declared, the ring
owner of its name (the live member whose slice holds the name's lane) becomes
its authority under epoch 1, and the record (``c/s/<name>``) keeps it there
when members come and go: a stream does not move with the slices. Every
request through another node is forwarded to the authority
(:mod:`dynaq.api.stream_proxy`).

**Failover.** When the authority is not in the ring, the first request (or
the copies' refresh, within a second) asks every live member the size of its
copy and records the most complete one (ties: the lowest name) as authority
under the next epoch, with the size it had then (``starts``). A copy that held
more than that under an earlier epoch (the old authority coming back, a
follower that was away) cuts its tail back to that size before it follows.
With ``acks = quorum`` every acknowledged entry is on a majority of the
copies, so the most complete live copy has all of them when one node fails.

Every write of a record is conditional (``put_if_absent``, ``put_if_version``;
a deletion leaves a tombstone), so of two nodes failing over at once one
wins and the other follows its choice; and Cassandra never has to order a
plain write against a conditional one on the same key.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Protocol

from dynaq.clock import Clock
from dynaq.core.ids import LANES
from dynaq.core.membership import Member, MembershipView
from dynaq.errors import StreamNotFound, StreamUnavailable
from dynaq.storage.base import Store, prefix_end

RECORD_PREFIX = b"c/s/"
"""Authority records: ``c/s/<name>`` → JSON (see :class:`Record`)."""
_CACHE_S = 10.0


def record_key(name: str) -> bytes:
    return RECORD_PREFIX + name.encode()


def lane_of(name: str) -> int:
    """The lane a stream's name hashes to: the slice holding it names the first authority."""
    return zlib.crc32(name.encode()) % LANES


@dataclass
class Record:
    """A stream's authority now, its epoch, and where each epoch began."""

    node: str
    epoch: int = 1
    starts: list[tuple[int, str, int]] = field(default_factory=list)
    """``(epoch, node, size when it took over)`` for every epoch, oldest first."""
    deleted: bool = False

    def encode(self) -> bytes:
        return json.dumps(
            {"node": self.node, "epoch": self.epoch, "starts": self.starts, "deleted": self.deleted}
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Record:
        d = json.loads(raw)
        starts = [(int(e), str(n), int(s)) for e, n, s in d.get("starts", [])]
        return cls(str(d["node"]), int(d.get("epoch", 1)), starts, bool(d.get("deleted", False)))

    def cut_for(self, epoch: int) -> int | None:
        """How many entries a copy last written under ``epoch`` may keep: the size the
        next epoch began with (``None``: no later epoch, all of it)."""
        later = [s for e, _, s in self.starts if e > epoch]
        return min(later) if later else None


class CopyProbe(Protocol):
    """Asks live members how much of a stream they hold (HTTP in a node)."""

    async def sizes(self, members: list[Member], stream: str) -> dict[str, int]: ...


class StreamAuthority:
    """Answers, for a stream name, whether this node serves it or which member does."""

    def __init__(self, store: Store, view: MembershipView, clock: Clock) -> None:
        self._store = store
        self._view = view
        self._clock = clock
        self._cache: dict[str, tuple[str, float]] = {}
        self.probe: CopyProbe | None = None
        """Set in a ring with copies: lets :meth:`route` fail a stream over."""

    @property
    def me(self) -> str:
        return self._view.me.name

    def members(self) -> list[Member]:
        """The live members now."""
        return self._view.members

    async def record_of(self, name: str) -> tuple[Record, int] | None:
        """The stream's record and its version, read from the store."""
        item = await self._store.get(record_key(name))
        return None if item is None else (Record.decode(item.value), item.version)

    async def node_of(self, name: str) -> str | None:
        """The node serving ``name``; ``None`` if no node was recorded (or it was deleted)."""
        node, _ = await self._state(name)
        return node

    async def serves_here(self, name: str) -> bool:
        """Whether this node's ``name`` is its own to list: it is the recorded authority
        (or none is recorded), not a copy of another's nor of a deleted stream."""
        node, deleted = await self._state(name)
        return not deleted and node in (self.me, None)

    async def _state(self, name: str, *, fresh: bool = False) -> tuple[str | None, bool]:
        """The recorded node (``None``: no record, or a tombstone) and whether the stream
        was deleted, from a cache of ``_CACHE_S`` (unless ``fresh``)."""
        cached = self._cache.get(name)
        now = self._clock.monotonic()
        if cached is not None and now - cached[1] < _CACHE_S and not fresh:
            return (cached[0] or None), cached[0] == ""
        got = await self.record_of(name)
        if got is None:
            self._cache.pop(name, None)
            return None, False
        node = "" if got[0].deleted else got[0].node
        self._cache[name] = (node, now)
        return (node or None), node == ""

    async def all(self) -> dict[str, Record]:
        """Every recorded stream (tombstones of deleted ones included)."""
        rows = await self._store.scan(RECORD_PREFIX, prefix_end(RECORD_PREFIX), 100_000)
        return {k[len(RECORD_PREFIX) :].decode(): Record.decode(v) for k, v in rows}

    async def route(self, name: str, *, declaring: bool = False) -> Member | None:
        """Where a request for stream ``name`` goes: ``None`` to serve it here, or the
        live member that is its authority.

        ``declaring``: a stream with no authority yet gets the ring owner of its
        name, recorded. Otherwise a stream nobody recorded is served here (this
        node's own, or a 404). An authority not in the ring is failed over (see
        the module docstring); :class:`~dynaq.errors.StreamUnavailable` if that
        cannot be done now.
        """
        # A declaration reads the record afresh: a cached authority may stand for a
        # stream deleted since through another member (its tombstone must be seen,
        # or the declaration would reach a node that no longer serves the name).
        node, deleted = await self._state(name, fresh=declaring)
        if deleted and not declaring:
            # A tombstone seen a moment ago: the name may have been declared again
            # through another member since (a 404 is worth one read of the record).
            node, deleted = await self._state(name, fresh=True)
        if node is None:
            if deleted and not declaring:
                # Its copies may linger a moment before they are dropped: never serve one.
                raise StreamNotFound(f"stream {name!r} does not exist")
            if not declaring:
                return None
            node = await self._create(name, self._view.owner_of_lane(lane_of(name)).name)
        live = {m.name: m for m in self._view.members}
        if node not in live:
            node = await self.fail_over(name)
        return None if node == self.me else live.get(node)

    async def _create(self, name: str, node: str) -> str:
        """Record ``node`` as the authority of a new (or deleted and re-declared) stream;
        return the authority recorded (another node's, if it got there first)."""
        key = record_key(name)
        first = Record(node, 1, [(1, node, 0)]).encode()
        if await self._store.put_if_absent(key, first) is not None:
            self._cache[name] = (node, self._clock.monotonic())
            return node
        got = await self.record_of(name)
        if got is not None and got[0].deleted:
            epoch = got[0].epoch + 1
            fresh = Record(node, epoch, [(epoch, node, 0)])
            if await self._store.put_if_version(key, fresh.encode(), got[1]) is not None:
                self._cache[name] = (node, self._clock.monotonic())
                return node
        self.stale(name)
        winner = await self.node_of(name)
        if winner is None:
            raise StreamUnavailable(
                f"stream {name!r} is being declared or deleted elsewhere: retry"
            )
        return winner

    async def fail_over(self, name: str) -> str:
        """Hand ``name`` to its most complete live copy under a new epoch; return the
        authority recorded (this call's choice or a concurrent one's)."""
        got = await self.record_of(name)
        if got is None or got[0].deleted:
            raise StreamUnavailable(f"stream {name!r} was deleted meanwhile")
        rec, version = got
        live = self._view.members
        if rec.node in {m.name for m in live}:
            return rec.node  # back, or already failed over by another node
        if self.probe is None:
            raise StreamUnavailable(
                f"stream {name!r} is served by node {rec.node!r}, which is not in the ring now; "
                "retry when it is back"
            )
        sizes = await self.probe.sizes(live, name)
        if not sizes:
            raise StreamUnavailable(
                f"stream {name!r}: its node {rec.node!r} is down and no live node holds a copy"
            )
        winner = min(sizes, key=lambda n: (-sizes[n], n))
        epoch = rec.epoch + 1
        new = Record(winner, epoch, [*rec.starts, (epoch, winner, sizes[winner])])
        if await self._store.put_if_version(record_key(name), new.encode(), version) is None:
            self.stale(name)  # another node failed it over first: follow its choice
            again = await self.node_of(name)
            if again is None:
                raise StreamUnavailable(f"stream {name!r} was deleted meanwhile")
            return again
        self._cache[name] = (winner, self._clock.monotonic())
        return winner

    async def forget(self, name: str) -> None:
        """The stream was deleted on its authority: leave a tombstone (its copies go too)."""
        self._cache[name] = ("", self._clock.monotonic())
        got = await self.record_of(name)
        if got is None or got[0].deleted or got[0].node != self.me:
            return
        rec, version = got
        tomb = Record(rec.node, rec.epoch, rec.starts, deleted=True)
        await self._store.put_if_version(record_key(name), tomb.encode(), version)

    def stale(self, name: str) -> None:
        """A forwarded request found no such stream: read the record again next time."""
        self._cache.pop(name, None)

    async def claim_local(self, names: list[str]) -> None:
        """Record this node as the authority of its streams that have no record (streams
        declared before authorities were recorded)."""
        for name in names:
            if await self.record_of(name) is None:
                await self._create(name, self.me)

    async def check_local(self, name: str, *, declaring: bool = False) -> None:
        """A forwarded request reached this node: it must be the stream's authority
        (a stale route must not create or serve a second copy). Reads the record
        afresh; :class:`~dynaq.errors.StreamUnavailable` (retriable) if it names another.

        ``declaring``: a name with no record, or a tombstone, is recorded with this
        node as its authority before it is declared here (the sender routed it here),
        so the stream it declares is one every member routes to."""
        node, deleted = await self._state(name, fresh=True)
        if node is None and declaring:
            node = await self._create(name, self.me)
        elif deleted:
            # What is left here of a deleted stream (a copy not dropped yet) is never served.
            raise StreamNotFound(f"stream {name!r} does not exist")
        if node not in (None, self.me):
            raise StreamUnavailable(
                f"stream {name!r} is served by node {node!r}, not this one: retry"
            )
