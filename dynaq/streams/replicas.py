"""Copies of streams on a ring: which nodes hold them, how followers keep up, and when
an append counts as acknowledged.

A stream's copies are its authority's and those of the next ``replicas - 1``
live members after it, in name order (fewer in a smaller ring). A follower
copies the authority's entries by listening from its own size, as Sherlock's
followers do, appends them at the same indexes (fsync'd, validated against the
same schema) and then reports the size it holds. With ``acks = "quorum"`` an
append is acknowledged once a majority of the copies hold it (the authority's
own fsync counts as one), so a single failed node never loses an
acknowledged entry; with ``acks = "leader"``, after the authority's fsync.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, Protocol

from dynaq.clock import Clock
from dynaq.core.membership import Member, MembershipView
from dynaq.core.stream_copies import Declared
from dynaq.errors import DynaqError, ReplicationTimeout, StreamNotFound
from dynaq.streams.authority import StreamAuthority
from dynaq.streams.service import StreamService
from dynaq.tasks import cancel_and_wait

log = logging.getLogger(__name__)


def followers_of(live: list[str], authority: str, replicas: int) -> list[str]:
    """The live members that copy a stream served by ``authority``: the next
    ``replicas - 1`` after it in name order, wrapping around."""
    ring = sorted(set(live) | {authority})
    at = ring.index(authority)
    after = [n for n in ring[at + 1 :] + ring[:at] if n != authority]
    return after[: max(0, replicas - 1)]


class CopySizes:
    """On an authority: the size each follower reported for each stream, and appends
    waiting for their quorum."""

    def __init__(self, view: MembershipView, clock: Clock, replicas: int, quorum: bool) -> None:
        self._view = view
        self._clock = clock
        self.replicas = replicas
        self.quorum = quorum
        self._sizes: dict[str, dict[str, int]] = {}
        self._changed: dict[str, asyncio.Event] = {}
        self._deletions: dict[str, int] = {}

    def followers(self, stream: str) -> list[str]:
        return followers_of([m.name for m in self._view.members], self._view.me.name, self.replicas)

    def reported(self, stream: str, node: str, size: int) -> None:
        """``node`` holds ``size`` entries of ``stream`` (fsync'd)."""
        self._sizes.setdefault(stream, {})[node] = size
        event = self._changed.pop(stream, None)
        if event is not None:
            event.set()

    def sizes(self, stream: str) -> dict[str, int]:
        """The followers' last reported sizes (those in the copy set now)."""
        known = self._sizes.get(stream, {})
        return {n: known.get(n, 0) for n in self.followers(stream)}

    def forget(self, stream: str) -> None:
        """``stream`` was deleted: its copies' sizes go (a stream declared again under
        the name starts from none, never confirmed by the old copies), and appends
        still waiting for its quorum end at once (404, not a timeout)."""
        self._sizes.pop(stream, None)
        self._deletions[stream] = self._deletions.get(stream, 0) + 1
        event = self._changed.pop(stream, None)
        if event is not None:
            event.set()

    def needed(self, stream: str) -> int:
        """How many copies, the authority's included, an acknowledged append is on."""
        if not self.quorum:
            return 1
        return (1 + len(self.followers(stream))) // 2 + 1

    async def wait(self, stream: str, end: int, timeout_s: float) -> None:
        """Return once the quorum holds entries up to ``end`` (exclusive);
        :class:`ReplicationTimeout` after ``timeout_s``."""
        deadline = self._clock.monotonic() + timeout_s
        deletions = self._deletions.get(stream, 0)
        while True:
            have = 1 + sum(1 for s in self.sizes(stream).values() if s >= end)
            need = self.needed(stream)
            if have >= need:
                return
            if self._deletions.get(stream, 0) != deletions:
                raise StreamNotFound(
                    f"stream {stream!r} was deleted before a quorum of its copies held "
                    f"the entries up to index {end - 1}"
                )
            left = deadline - self._clock.monotonic()
            if left <= 0:
                raise ReplicationTimeout(
                    f"stream {stream!r}: the entries up to index {end - 1} are durable on "
                    f"this node but {have} of the {need} copies a quorum needs confirmed "
                    "them in time; a retry may append them twice"
                )
            event = self._changed.setdefault(stream, asyncio.Event())
            try:
                async with asyncio.timeout(min(left, 1.0)):  # the copy set may change too
                    await event.wait()
            except TimeoutError:
                pass


class AuthorityLink(Protocol):
    """How a follower talks to a stream's authority (HTTP in a node: see
    :mod:`dynaq.cluster.stream_link`). Failures are :class:`DynaqError`\\ s."""

    async def declared(self, authority: Member, stream: str) -> Declared: ...

    def entries(
        self, authority: Member, stream: str, start: int
    ) -> AsyncIterator[tuple[int, list[Any]]]: ...

    async def report(self, authority: Member, stream: str, size: int) -> None: ...


class Followers:
    """Runs this node's copies: one task per stream it follows, started and stopped as
    the ring and the streams change (:meth:`refresh`, every ``interval_s``)."""

    def __init__(
        self,
        streams: StreamService,
        authority: StreamAuthority,
        link: AuthorityLink,
        view: MembershipView,
        clock: Clock,
        replicas: int,
        retry_s: float = 0.5,
    ) -> None:
        self._streams = streams
        self._authority = authority
        self._link = link
        self._view = view
        self._clock = clock
        self._replicas = replicas
        self._retry_s = retry_s
        self._tasks: dict[str, tuple[str, asyncio.Task[None]]] = {}

    async def run(self, interval_s: float = 1.0) -> None:
        """Refresh until cancelled; then stop every copy task."""
        try:
            while True:
                try:
                    await self.refresh()
                except DynaqError as exc:
                    log.warning("stream copies not refreshed", extra={"error": str(exc)})
                await self._clock.sleep(interval_s)
        finally:
            for _, task in list(self._tasks.values()):
                await cancel_and_wait(task)
            self._tasks.clear()

    async def refresh(self) -> None:
        """Start and stop copy tasks to match the records and the ring; fail over a
        stream whose authority left the ring; take over as the recorded authority of a
        new epoch; drop copies of deleted streams."""
        me = self._view.me.name
        live = {m.name: m for m in self._view.members}
        local = set(self._streams.names())
        wanted: dict[str, str] = {}
        for stream, rec in (await self._authority.all()).items():
            if rec.deleted:
                if stream in local and stream not in self._tasks:
                    await self._drop_copy(stream)
                continue
            node = rec.node
            if node not in live:
                try:
                    node = await self._authority.fail_over(stream)
                except DynaqError as exc:
                    log.warning(
                        "stream failover not done", extra={"stream": stream, "error": str(exc)}
                    )
                    continue
            if node == me:
                if stream in local and self._streams.epoch(stream) < rec.epoch:
                    await self._streams.set_epoch(stream, rec.epoch, authority=True)
                    log.info(
                        "serving stream as its authority",
                        extra={"stream": stream, "epoch": rec.epoch},
                    )
            elif me in followers_of(list(live), node, self._replicas):
                wanted[stream] = node
        for stream, (node, task) in list(self._tasks.items()):
            if wanted.get(stream) != node or task.done():
                await cancel_and_wait(task)
                del self._tasks[stream]
        for stream, node in wanted.items():
            if stream not in self._tasks:
                task = asyncio.create_task(self._follow(stream, node), name=f"copy-{stream}")
                self._tasks[stream] = (node, task)

    async def _drop_copy(self, stream: str) -> None:
        # Read again: this refresh's snapshot of the records may be older than a
        # declaration of the name since, which made this node's stream a new one.
        got = await self._authority.record_of(stream)
        if got is not None and not got[0].deleted:
            return
        try:
            await self._streams.delete(stream)
            log.info("copy of a deleted stream dropped", extra={"stream": stream})
        except DynaqError as exc:
            log.warning(
                "copy of a deleted stream kept", extra={"stream": stream, "error": str(exc)}
            )

    def following(self) -> dict[str, str]:
        """The streams this node copies now, and their authorities."""
        return {s: node for s, (node, _) in self._tasks.items()}

    def _member(self, node: str) -> Member | None:
        return next((m for m in self._view.members if m.name == node), None)

    async def _follow(self, stream: str, node: str) -> None:
        """Copy ``stream`` from ``node`` for as long as this node follows it."""
        while True:
            member = self._member(node)
            if member is None:
                return  # gone from the ring: the next refresh decides
            try:
                await self._copy(stream, member)
            except DynaqError as exc:
                log.info(
                    "stream copy interrupted; resuming from its size",
                    extra={"stream": stream, "authority": node, "error": str(exc)},
                )
            await self._clock.sleep(self._retry_s)

    async def _copy(self, stream: str, authority: Member) -> None:
        got = await self._authority.record_of(stream)
        if got is None or got[0].deleted or got[0].node != authority.name:
            return  # moved on meanwhile: the next refresh decides
        rec = got[0]
        declared = await self._link.declared(authority, stream)
        await self._streams.declare(stream, declared.schema, declared.order_key)
        # Epoch 0: a copy never stamped (it was the authority of epoch 1, or is new).
        mine = max(1, self._streams.epoch(stream))
        if mine < rec.epoch:
            cut = rec.cut_for(mine)
            if cut is not None and self._streams.info(stream).size > cut:
                await self._streams.truncate(stream, cut)
        if self._streams.epoch(stream) != rec.epoch:
            await self._streams.set_epoch(stream, rec.epoch, authority=False)
        size = self._streams.info(stream).size
        await self._link.report(authority, stream, size)
        async for first, entries in self._link.entries(authority, stream, size):
            staged = await self._streams.replicate(stream, first, entries)
            await self._link.report(authority, stream, staged.first_index + staged.count)
