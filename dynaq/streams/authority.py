"""Which node of a ring serves each stream: its authority, recorded in the shared store.

A stream's files live on one node. When a stream is first declared, the ring
owner of its name (the live member whose slice holds the name's lane) becomes
its authority, and the choice is written to the store (``c/s/<name>``), so it
stays put when members come and go: a stream does not move with the slices,
whose data would stay behind. Every stream request through any other node is
forwarded to the authority (see :mod:`dynaq.api.stream_proxy`); while the
authority is not in the ring, its streams answer 503 ``stream_unavailable``
and come back with it, whole (no replicas yet: see the README).

The record is written with plain puts and deletes (never mixed with
conditional writes on the same key, which Cassandra orders by different
clocks). Two first declarations at once through nodes that agree on the ring
pick the same owner; through nodes whose views differ during a membership
change, the later record wins and the other node's copy is an orphan that no
request reaches.
"""

from __future__ import annotations

import json
import zlib

from dynaq.clock import Clock
from dynaq.core.ids import LANES
from dynaq.core.membership import Member, MembershipView
from dynaq.errors import StreamUnavailable
from dynaq.storage.base import Store, prefix_end

RECORD_PREFIX = b"c/s/"
"""Authority records: ``c/s/<name>`` → ``{"node": name}`` (JSON)."""
_CACHE_S = 10.0


def record_key(name: str) -> bytes:
    return RECORD_PREFIX + name.encode()


def lane_of(name: str) -> int:
    """The lane a stream's name hashes to: the slice holding it names the first authority."""
    return zlib.crc32(name.encode()) % LANES


class StreamAuthority:
    """Answers, for a stream name, whether this node serves it or which member does."""

    def __init__(self, store: Store, view: MembershipView, clock: Clock) -> None:
        self._store = store
        self._view = view
        self._clock = clock
        self._cache: dict[str, tuple[str, float]] = {}

    @property
    def me(self) -> str:
        return self._view.me.name

    def members(self) -> list[Member]:
        """The live members now."""
        return self._view.members

    async def node_of(self, name: str) -> str | None:
        """The name of the node serving ``name``; ``None`` if no node was recorded."""
        cached = self._cache.get(name)
        now = self._clock.monotonic()
        if cached is not None and now - cached[1] < _CACHE_S:
            return cached[0]
        item = await self._store.get(record_key(name))
        if item is None:
            self._cache.pop(name, None)
            return None
        node = str(json.loads(item.value)["node"])
        self._cache[name] = (node, now)
        return node

    async def route(self, name: str, *, declaring: bool = False) -> Member | None:
        """Where a request for stream ``name`` goes: ``None`` to serve it here, or the
        live member that is its authority.

        ``declaring``: a stream with no authority yet gets the ring owner of its
        name, recorded. Otherwise a stream nobody recorded is served here (this
        node's own, or a 404). :class:`~dynaq.errors.StreamUnavailable` if the
        authority is not in the ring.
        """
        node = await self.node_of(name)
        if node is None:
            if not declaring:
                return None
            node = self._view.owner_of_lane(lane_of(name)).name
            await self.record(name, node)
        if node == self.me:
            return None
        for m in self._view.members:
            if m.name == node:
                return m
        raise StreamUnavailable(
            f"stream {name!r} is served by node {node!r}, which is not in the ring now; "
            "retry when it is back"
        )

    async def all(self) -> dict[str, str]:
        """Every recorded stream and the node that serves it."""
        rows = await self._store.scan(RECORD_PREFIX, prefix_end(RECORD_PREFIX), 100_000)
        return {k[len(RECORD_PREFIX) :].decode(): str(json.loads(v)["node"]) for k, v in rows}

    async def record(self, name: str, node: str) -> None:
        await self._store.put(record_key(name), json.dumps({"node": node}).encode())
        self._cache[name] = (node, self._clock.monotonic())

    async def forget(self, name: str) -> None:
        """The stream was deleted on its authority: drop its record."""
        self._cache.pop(name, None)
        if await self.node_of(name) in (self.me, None):
            await self._store.delete(record_key(name))

    def stale(self, name: str) -> None:
        """A forwarded request found no such stream: read the record again next time."""
        self._cache.pop(name, None)

    async def claim_local(self, names: list[str]) -> None:
        """Record this node as the authority of its streams that have no record (streams
        declared before authorities were recorded, or whose record was lost)."""
        for name in names:
            if await self.node_of(name) is None:
                await self.record(name, self.me)

    async def check_local(self, name: str) -> None:
        """A forwarded request reached this node: it must be the stream's authority
        (a stale route must not create or serve a second copy). Reads the record
        afresh; :class:`~dynaq.errors.StreamUnavailable` (retriable) if it names another."""
        self.stale(name)
        node = await self.node_of(name)
        if node not in (None, self.me):
            raise StreamUnavailable(
                f"stream {name!r} is served by node {node!r}, not this one: retry"
            )
