"""Leases through the store's conditional puts: at most one holder per key.

A lease is one record, ``{"name": holder, "heartbeat_ms": last write}`` (JSON),
under its key. Writer slots (:mod:`dynaq.cluster.slots`) and the batch reaper
(:mod:`dynaq.services.batches.reaper`) both hold theirs through
:class:`CasLease`. Given per-key linearizable conditional puts (the storage
contract), it guarantees:

* **One winner.** Every write is ``put_if_absent`` or ``put_if_version`` on the
  version just read, so two holders racing for a key never both win.
* **Lapse.** Another holder's lease lapses ``lease_s`` after its last write,
  judged by the reader's wall clock and the reader's ``lease_s`` (so nodes
  must agree on ``lease_s`` and keep their clocks within a fraction of it).
  A caller may name holders that are ``live`` by other evidence (the ring):
  their leases never lapse. An unreadable record counts as lapsed.
* **Fencing.** :meth:`CasLease.refresh` succeeds only if nobody wrote the key
  since this holder's own last write, so a holder that was cut off for longer
  than the lease learns at its next refresh that the lease is gone. Between
  refreshes a holder acts on its belief; callers keep their refresh interval
  well inside the lease.
* **Restarts keep leases.** A record under the holder's own name is its to
  take again at once, whatever its age.

Records are never deleted: :meth:`CasLease.release` writes a lapsed record.
Cassandra orders plain and conditional writes with different clocks, so a key
written conditionally is only ever written conditionally.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Container
from dataclasses import dataclass

from dynaq.clock import Clock
from dynaq.storage.base import Item, Store


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """Who holds a lease, and when they last wrote it."""

    holder: str
    heartbeat_ms: int


class LeaseState(enum.Enum):
    """A lease record as one would-be holder sees it."""

    FREE = "free"
    """No record: the key was never leased."""
    MINE = "mine"
    """Recorded under this holder's own name (a restart, or a lease still held)."""
    LAPSED = "lapsed"
    """Another holder's, not written for ``lease_s`` and not live; or unreadable."""
    HELD = "held"
    """Another holder's, and still valid."""


def encode_record(record: LeaseRecord) -> bytes:
    """The stored bytes of a lease record (the writer-slot format since slots began)."""
    return json.dumps({"name": record.holder, "heartbeat_ms": record.heartbeat_ms}).encode()


def decode_record(raw: bytes) -> LeaseRecord | None:
    """A stored lease record, or ``None`` if it is unreadable."""
    try:
        data = json.loads(raw)
        return LeaseRecord(str(data["name"]), int(data["heartbeat_ms"]))
    except (ValueError, KeyError, TypeError):
        return None


class CasLease:
    """One holder's lease on one key of a shared store.

    ``acquire``/``take`` win the lease when it is free, this holder's own, or
    lapsed; ``refresh`` renews it only while nobody else has written the key;
    ``release`` lets others take it at once. ``held`` says whether this
    object's last write won and nobody is known to have written since.
    """

    def __init__(self, store: Store, key: bytes, holder: str, clock: Clock, lease_s: float) -> None:
        self._store = store
        self._clock = clock
        self.key = key
        self.holder = holder
        self.lease_ms = int(lease_s * 1000)
        self._version: int | None = None

    @property
    def held(self) -> bool:
        return self._version is not None

    def state(
        self, item: Item | None, *, live: Container[str] = frozenset(), now_ms: int | None = None
    ) -> LeaseState:
        """How ``item`` (the key's record as read) stands for this holder."""
        if item is None:
            return LeaseState.FREE
        record = decode_record(item.value)
        if record is None:
            return LeaseState.LAPSED
        if record.holder == self.holder:
            return LeaseState.MINE
        now = self._clock.wall_ms() if now_ms is None else now_ms
        if record.holder not in live and now - record.heartbeat_ms > self.lease_ms:
            return LeaseState.LAPSED
        return LeaseState.HELD

    async def acquire(self, *, live: Container[str] = frozenset()) -> bool:
        """Read the key and :meth:`take` the lease if it can be had."""
        return await self.take(await self._store.get(self.key), live=live)

    async def take(self, item: Item | None, *, live: Container[str] = frozenset()) -> bool:
        """Take the lease from the record ``item`` read; ``False`` if it is held
        by another, or if anyone wrote the key since ``item`` was read."""
        if self.state(item, live=live) is LeaseState.HELD:
            self._version = None
            return False
        value = self._record(self._clock.wall_ms())
        if item is None:
            self._version = await self._store.put_if_absent(self.key, value)
        else:
            self._version = await self._store.put_if_version(self.key, value, item.version)
        return self._version is not None

    async def refresh(self) -> bool:
        """Renew the lease; ``False`` if this holder has lost it (or never had it).

        A conditional put on this holder's own last version: if another holder
        took the lapsed lease meanwhile, the version moved and this fails.
        """
        if self._version is None:
            return False
        value = self._record(self._clock.wall_ms())
        version = await self._store.put_if_version(self.key, value, self._version)
        if version is None:
            # The version moved. If the record still names this holder, it moved
            # under this holder's own earlier write whose answer was lost (a
            # Cassandra LWT that timed out yet applied): the lease is still ours.
            item = await self._store.get(self.key)
            record = None if item is None else decode_record(item.value)
            if item is not None and record is not None and record.holder == self.holder:
                version = await self._store.put_if_version(self.key, value, item.version)
        self._version = version
        return version is not None

    async def release(self) -> bool:
        """Give the lease up: other holders see it lapsed at once (a record last
        written at time 0) unless they name this holder live, and this holder
        sees it as its own on a restart. ``False`` if it was not held."""
        if self._version is None:
            return False
        version = await self._store.put_if_version(self.key, self._record(0), self._version)
        self._version = None
        return version is not None

    def _record(self, heartbeat_ms: int) -> bytes:
        return encode_record(LeaseRecord(self.holder, heartbeat_ms))
