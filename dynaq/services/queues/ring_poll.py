"""Long polls that see the whole ring, whichever node they reach.

A node serves only its own slice of a queue, and behind a load balancer a
consumer cannot choose the node, so a long poll waiting only on the node it
reached would miss messages that land in another node's slice. A ring poll:

1. receives from this node's slice, then from each peer's (no waiting), and
   returns the first non-empty answer (on a node's workers, :attr:`RingPoll.fill_from_others`:
   the local answer topped up from the others' while it is short of the count
   asked and of the receive's byte budget);
2. otherwise *watches* every node (this one and each peer, in rounds of at
   most :data:`ROUND_S`): a watch waits until a node may have something
   visible for the queue but serves nothing, so cancelling the watches that
   did not fire loses nothing;
3. when a watch fires, receives from that node; messages are only ever served
   for a caller that is still waiting, so no message is left invisible by a
   poll that has already answered, or whose client has hung up.

Messages served by a peer stay that peer's: their receipts, visibility
changes and deletes go to it (:mod:`.receipts`). A peer that does not answer
is skipped for the round.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Protocol

from dynaq.clock import Clock
from dynaq.core.membership import Member, MembershipView
from dynaq.core.messages import Message
from dynaq.errors import InvalidInput, NotServing
from dynaq.services.queue_records import MAX_WAIT_S
from dynaq.services.queues.receive import Receiver
from dynaq.services.queues.receive_request import StillWanted, always_wanted
from dynaq.tasks import cancel_all

ROUND_S = 2.0
"""Longest single watch: bounds how late a peer that missed a wake-up is noticed."""

REWATCH_AFTER_S = 0.02
"""Pause before watching again a node whose wake-up served nothing: a wake-up meanwhile
is still seen (it stays set), and a node that keeps waking for nothing (an expired
message whose group is blocked) costs a receive per pause, not a busy loop."""


class PeerReceive(Protocol):
    """Receives and watches on another node of the ring."""

    async def receive_from(
        self,
        owner: Member,
        queue: str,
        max_messages: int,
        visibility_timeout_s: float,
        per_group: int = 1,
        max_bytes: int | None = None,
    ) -> list[Message]: ...

    async def watch(self, owner: Member, queue: str, wait_s: float) -> bool: ...


class RingPoll:
    """A long poll over every node's slice (see the module docstring)."""

    def __init__(self, receiver: Receiver, view: MembershipView, clock: Clock) -> None:
        self._receiver = receiver
        self._view = view
        self._clock = clock
        self.fill_from_others = False
        """Whether a receive this node's slice answers short asks the others for the
        rest, within its byte budget (a node's workers: clients see one node, and a
        lone node's receive takes whatever is visible, up to what was asked)."""

    async def _fill(
        self,
        peers: PeerReceive,
        others: Sequence[Member],
        queue: str,
        max_messages: int,
        vt: float,
        per_group: int,
        out: list[Message],
    ) -> list[Message]:
        """``out`` and, while it is short of ``max_messages`` and of the byte budget,
        what each of ``others`` in turn serves of the rest."""
        left = self._receiver.max_receive_bytes - sum(len(m.body) for m in out)
        for m in others:
            if len(out) >= max_messages or left <= 0:
                break
            more = await self._ask(peers, m, queue, max_messages - len(out), vt, per_group, left)
            out = [*out, *more]
            left -= sum(len(x.body) for x in more)
        return out

    async def receive(
        self,
        peers: PeerReceive,
        queue: str,
        max_messages: int,
        visibility_timeout_s: float | None,
        wait_time_s: float,
        wanted: StillWanted = always_wanted,
        per_group: int = 1,
    ) -> list[Message]:
        if not 0 <= wait_time_s <= MAX_WAIT_S:
            raise InvalidInput(f"wait time must be in 0..{MAX_WAIT_S:g} seconds")
        give_up = self._clock.monotonic() + wait_time_s
        out = await self._receiver.receive(
            queue, max_messages, visibility_timeout_s, per_group=per_group
        )
        if out and not self.fill_from_others:
            return out
        vt = await self._receiver.visibility_of(queue, visibility_timeout_s)
        others = [m for m in self._view.members if m.name != self._view.me.name]
        random.shuffle(others)  # spread first looks over the peers
        if self.fill_from_others:
            out = await self._fill(peers, others, queue, max_messages, vt, per_group, out)
            if out:
                return out
        for m in others if not self.fill_from_others else ():
            out = await self._ask(peers, m, queue, max_messages, vt, per_group)
            if out:
                return out
        while not self._receiver.draining:
            left = give_up - self._clock.monotonic()
            if left <= 0:
                break
            out = await self._round(
                peers, others, queue, max_messages, vt, min(left, ROUND_S), wanted, per_group
            )
            if out:
                return out
        return []

    async def _round(
        self,
        peers: PeerReceive,
        others: Sequence[Member],
        queue: str,
        max_messages: int,
        vt: float,
        wait_s: float,
        wanted: StillWanted,
        per_group: int,
    ) -> list[Message]:
        ends = self._clock.monotonic() + wait_s
        watches: dict[asyncio.Task[bool], Member | None] = {
            asyncio.create_task(self._watch(peers, node, queue, wait_s)): node
            for node in [None, *others]
        }
        try:
            while watches:
                done, _ = await asyncio.wait(watches, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    node = watches.pop(task)
                    if task.cancelled() or task.exception() is not None or not task.result():
                        continue
                    if not wanted():
                        return []
                    if node is None:
                        out = await self._receiver.receive(
                            queue, max_messages, vt, per_group=per_group
                        )
                    else:
                        out = await self._ask(peers, node, queue, max_messages, vt, per_group)
                    if out:
                        return out
                    # Woken for nothing (a wake-up older than that node's last receive,
                    # or a group still blocked): watch it again, or a wake-up that comes
                    # next (the group's message deleted) waits for the next round.
                    left = ends - self._clock.monotonic() - REWATCH_AFTER_S
                    if left > 0:
                        rewatch = self._watch(peers, node, queue, left, REWATCH_AFTER_S)
                        watches[asyncio.create_task(rewatch)] = node
            return []
        finally:
            await cancel_all(watches)

    async def _watch(
        self,
        peers: PeerReceive,
        node: Member | None,
        queue: str,
        wait_s: float,
        after_s: float = 0.0,
    ) -> bool:
        """Watch ``node`` (``None``: this one) for ``wait_s``, starting ``after_s`` from now."""
        if after_s > 0:
            await self._clock.sleep(after_s)
        if node is None:
            return await self._receiver.watch(queue, wait_s)
        return await peers.watch(node, queue, wait_s)

    @staticmethod
    async def _ask(
        peers: PeerReceive,
        node: Member,
        queue: str,
        max_messages: int,
        vt: float,
        per_group: int,
        max_bytes: int | None = None,
    ) -> list[Message]:
        try:
            if max_bytes is None:  # a peer of an earlier version takes no budget
                return await peers.receive_from(node, queue, max_messages, vt, per_group)
            return await peers.receive_from(node, queue, max_messages, vt, per_group, max_bytes)
        except NotServing:
            return []  # that node is down, joining or leaving: the others still serve
