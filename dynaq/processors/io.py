"""Inputs, outputs and the backing stream, over :class:`dynaq.client.AsyncClient` only.

- :class:`StreamInput`: a tailer's reads (an index in, the next accepted entry out),
  cached: stream entries never change once written, so a re-read is a cache hit.
- :class:`Backing`: the processor's hidden backing stream; every append carries the
  publisher lease's token (a worker whose lease lapsed writes nothing there).
- :class:`Lease`: takes that lease and keeps renewing it from a supervised task.
- :class:`QueueInput` / queue outputs (:func:`enqueue`): receive and delete, enqueue.

Exactly once over queues commits each step with the node's transactions instead
(:mod:`dynaq.processors.queue_once`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from dynaq.client import AsyncClient, DynaqError, NewMessage, ReceivedMessage
from dynaq.processors import records

log = logging.getLogger(__name__)

PUBLISHER_FENCED = "publisher_fenced"
INDEX_TAKEN = "index_taken"
STREAM_NOT_FOUND = "stream_not_found"
READ_CHUNK = 100
HIDDEN_PREFIX = "_cues."


def code_of(exc: BaseException) -> str | None:
    """The node's error code (``index_taken``, ``publisher_fenced``...)."""
    return exc.code if isinstance(exc, DynaqError) else None


DURABLE_WAIT_S = 10.0
"""How long recovery waits for a quorum of a stream's copies to confirm what it read."""


class NotDurable(Exception):
    """Entries recovery read are not (yet) on a quorum of the stream's copies: an
    interruption (a failover may still cut them away); recovery runs again."""


async def durable(client: AsyncClient, stream: str, end: int, wait_s: float | None = None) -> None:
    """Return once the entries of ``stream`` below ``end`` are on a majority of its copies
    (the authority's and its followers' reported sizes, as the ring's listing shows
    them; at once on a node alone); :class:`NotDurable` after ``wait_s``.

    In a ring, a stream's authority serves an entry as soon as it holds it, before the
    followers confirm it; an append that answered 503 ``replication_timeout`` (or whose
    answer was lost) may be on the authority alone, and a failover cuts it away. What
    recovery decides from a read (an output landed, an attempt was recorded) must hold
    after any single failure, so it waits for what the quorum holds."""
    deadline = asyncio.get_running_loop().time() + (DURABLE_WAIT_S if wait_s is None else wait_s)
    delay = 0.05
    while True:
        infos = await client.list_streams(hidden=stream.startswith(HIDDEN_PREFIX))
        info = next((i for i in infos if i.name == stream), None)
        # Not listed: its authority did not answer the listing (a failover under way).
        have, copies = 0, 0
        if info is not None:
            if not info.copies:  # a node alone (or one copy): its fsync is the whole story
                return
            copies = 1 + len(info.copies)
            have = 1 + sum(1 for size in info.copies.values() if size >= end)
            if have >= copies // 2 + 1:
                return
        if asyncio.get_running_loop().time() + delay > deadline:
            raise NotDurable(
                f"{stream}: the entries below index {end} are on {have} of its "
                f"{copies} copies known, not a majority"
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)


class LeaseLost(Exception):
    """The backing stream's publisher lease lapsed or was taken: stop stepping."""


class Stopping(Exception):
    """The runner is stopping: abandon a step that has not delivered anything yet."""


@dataclass
class StreamInput:
    """One input stream read at tailer indexes (its cache holds entries at or after
    the lowest index still asked for)."""

    client: AsyncClient
    stream: str
    cache: dict[int, Any] = field(default_factory=dict)
    size: int = 0
    confirmed: int = 0
    """In a ring: the entries below this are on a majority of the stream's copies."""
    alone: bool = False
    """The node answers alone (no ring): what it serves is fsync'd, and final."""

    async def entry_at(self, index: int) -> tuple[bool, Any]:
        """``(True, entry)`` for the entry at ``index``, ``(False, None)`` if the stream
        does not hold it yet (in a ring: not on a majority of its copies yet)."""
        if index not in self.cache:
            got = await self.client.read_stream(self.stream, index, READ_CHUNK)
            for item in got:
                self.cache[int(item["index"])] = item["entry"]
            if index not in self.cache:
                return False, None
        if index >= self.confirmed and not self.alone:
            await self._confirm()
            if index >= self.confirmed and not self.alone:
                return False, None
        return True, self.cache[index]

    async def _confirm(self) -> None:
        """Learn how much of the stream a majority of its copies holds. An authority
        serves an entry before its followers confirm it; if it fails first, the entry
        is cut away at failover and another takes its index, so a step must never
        take it (its output would stand for an entry that is not there, and the one
        that is would be skipped)."""
        hidden = self.stream.startswith(HIDDEN_PREFIX)
        info = next(
            (i for i in await self.client.list_streams(hidden=hidden) if i.name == self.stream),
            None,
        )
        if info is None:  # its authority did not answer the listing: nothing more is known
            return
        if info.copies is None:
            self.alone = True
            return
        sizes = sorted([info.size, *info.copies.values()], reverse=True)
        self.confirmed = max(self.confirmed, sizes[len(sizes) // 2])

    def forget_before(self, index: int) -> None:
        if len(self.cache) > 4 * READ_CHUNK:
            for i in [i for i in self.cache if i < index]:
                del self.cache[i]


class Backing:
    """The processor's backing stream, appended with the lease's token."""

    def __init__(self, client: AsyncClient, name: str, lease: Lease) -> None:
        self.client, self.name, self.lease = client, name, lease
        self.appends = 0
        self.deferred: list[dict[str, Any]] = []
        """Records that go out with the next :meth:`append`, in the same request."""

    def defer(self, record: dict[str, Any]) -> None:
        """Write ``record`` with the next :meth:`append`, before its record, in one
        request (one fsync): all of them land, in order, or none does."""
        self.deferred.append(record)

    async def append(self, record: dict[str, Any]) -> int:
        """Append the deferred records and ``record`` durably, in one request; return
        ``record``'s index; :class:`LeaseLost` if the lease fences it out."""
        token = self.lease.token
        if token is None or self.lease.lost.is_set():
            raise LeaseLost(f"{self.name}: the publisher lease is not held")
        batch = [*self.deferred, record]
        try:
            got = await self.client.append(self.name, batch, token=token)
        except DynaqError as exc:
            if code_of(exc) == PUBLISHER_FENCED:
                self.lease.lost.set()
                raise LeaseLost(f"{self.name}: {exc}") from exc
            raise
        self.deferred.clear()
        self.appends += 1
        return got.first_index + len(batch) - 1

    async def since_last_snapshot(self, end: int | None = None) -> list[dict[str, Any]]:
        """The last ``snapshot`` record and every record after it (``[]`` if none), or,
        with no snapshot at all, every ``position`` record's last one; only the records
        below ``end``, if given."""
        if end is None:
            end = await self.client.stream_size(self.name)
        tail: list[dict[str, Any]] = []
        while end > 0:
            start = max(0, end - 256)
            got = await self.client.read_stream(self.name, start, end - start)
            chunk = [item["entry"] for item in got]
            for i in range(len(chunk) - 1, -1, -1):
                if chunk[i].get("t") in (records.SNAPSHOT, records.POSITION):
                    return chunk[i:] + tail
            tail = chunk + tail
            end = start
        return []


class Lease:
    """The backing stream's publisher lease: :meth:`acquire` waits until this worker
    holds it; :meth:`keep` renews it every third of its TTL until cancelled, and sets
    :attr:`lost` when it could not (a new token would mean another worker may have
    run this processor meanwhile, so the old one is never silently swapped)."""

    def __init__(self, client: AsyncClient, stream: str, ttl_s: float) -> None:
        self.client, self.stream, self.ttl_s = client, stream, ttl_s
        self.token: int | None = None
        self.lost = asyncio.Event()

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Take the lease, waiting while another worker holds it; False if stopped first.
        A token this worker still holds (after an interruption) is renewed, not waited
        out; a renewal that comes back with a new token took the lease anew."""
        delay = 0.05
        while not stop.is_set():
            try:
                if self.token is not None:  # ours until it expires, or taken since
                    got = await self.client.renew_publisher(self.stream, self.token, self.ttl_s)
                else:
                    got = await self.client.acquire_publisher(self.stream, self.ttl_s)
            except DynaqError as exc:
                if code_of(exc) != PUBLISHER_FENCED and not exc.retriable:
                    raise
            else:
                self.token = got.token
                self.lost.clear()
                return True
            try:
                async with asyncio.timeout(delay):
                    await stop.wait()
            except TimeoutError:
                pass
            delay = min(delay * 2, self.ttl_s / 2)
        return False

    async def keep(self) -> None:
        """Renew until cancelled; on failure set :attr:`lost` and return."""
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            token = self.token
            try:
                got = await self.client.renew_publisher(self.stream, token or 0, self.ttl_s)
            except DynaqError as exc:
                if exc.retriable:
                    continue  # the next renewal may get through before the TTL ends
                log.warning(
                    "processor lease lost", extra={"stream": self.stream, "error": str(exc)}
                )
                self.lost.set()
                return
            if got.token != token:
                log.warning("processor lease lapsed", extra={"stream": self.stream})
                self.token = got.token
                self.lost.set()
                return

    async def release(self) -> None:
        if self.token is not None:
            try:
                await self.client.release_publisher(self.stream, self.token)
            except DynaqError as exc:
                log.info("lease not released", extra={"stream": self.stream, "error": str(exc)})
            self.token = None


@dataclass
class QueueInput:
    """A queue input: messages received one at a time, bodies decoded as JSON."""

    client: AsyncClient
    queue: str
    visibility_timeout_s: float = 30.0

    async def receive(self) -> tuple[ReceivedMessage, Any] | None:
        got = await self.client.receive(self.queue, 1, self.visibility_timeout_s, wait_time_s=1.0)
        if not got:
            return None
        m = got[0]
        try:
            entry = json.loads(m.body)
        except ValueError:
            entry = {"body": m.body.decode("utf-8", "replace")}
        return m, entry

    async def delete(self, m: ReceivedMessage) -> None:
        await self.client.delete(self.queue, [m.id], m.addr or None)


async def enqueue(client: AsyncClient, queue: str, entry: Any, dedup_id: str) -> None:
    """A queue output: the entry as a JSON body, with the delivery's dedup id (a
    redelivery inside the queue's dedup window is stored once)."""
    body = records.canonical(entry)
    await client.enqueue(queue, [NewMessage(body, dedup_id=dedup_id)])
