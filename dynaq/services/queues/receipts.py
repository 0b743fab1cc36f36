"""Deletes and visibility changes by receipt: they act on one delivery only.

A receipt (:mod:`dynaq.core.receipts`) names a message and one delivery of
it. The node that served the message holds its latest delivery number, so a
receipt is checked there: through any other node the request is forwarded to
that owner (signed, as visibility changes are), and answered with a
retriable 503 (:class:`~dynaq.errors.NotServing`) if the owner does not
answer. Guarantees:

* a receipt from an earlier delivery of a message that has since been served
  again is *stale*: it is refused per item and never deletes, extends or
  releases the newer delivery;
* a receipt whose message is not in flight (its visibility ran out and nobody
  received it since, or its owner restarted) still deletes it: no later
  delivery exists to protect;
* a receipt-checked delete holds the message invisible from the check until
  the delete is durable, so no receive can serve it in between.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, runtime_checkable

from dynaq.clock import Clock
from dynaq.core.ids import lane_of
from dynaq.core.membership import Member, MembershipView
from dynaq.errors import NotServing
from dynaq.services.catalog import QueueInfo
from dynaq.services.queues.state import QueueStates

Pairs = Sequence[tuple[int, int]]
"""``(message_id, delivery)`` per receipt."""
Outcome = tuple[list[int], list[int]]
"""Ids acted on, and ids whose receipt was stale."""

_DELETE_HOLD_S = 30.0
TRANSACTION_HOLD_S = 30.0
"""How long a transaction's inputs stay invisible (at least) from their check until
its write: far longer than the write takes; a coordinator that dies in between
leaves them to be served again after it."""


class PeerReceipts(Protocol):
    """Forwards receipt-checked requests to the node that served the messages."""

    async def delete_receipts(self, owner: Member, queue: str, pairs: Pairs) -> Outcome: ...

    async def change_visibility_receipts(
        self, owner: Member, queue: str, pairs: Pairs, visibility_timeout_s: float
    ) -> Outcome: ...


@runtime_checkable
class PeerHolds(Protocol):
    """Asks the node that served messages to check and hold receipts for a transaction."""

    async def hold_receipts(self, owner: Member, queue: str, pairs: Pairs) -> list[int]: ...


class ReceiptActions:
    """Receipt-checked deletes and visibility changes for one node."""

    def __init__(
        self,
        states: QueueStates,
        view: MembershipView,
        clock: Clock,
        delete: Callable[[QueueInfo, list[int]], Awaitable[list[int]]],
        change_here: Callable[[QueueInfo, list[int], float], list[int]],
        peers: Callable[[], PeerReceipts | None],
    ) -> None:
        self._states = states
        self._view = view
        self._clock = clock
        self._delete = delete
        self._change_here = change_here
        self._peers = peers

    async def delete(self, info: QueueInfo, pairs: Pairs) -> Outcome:
        """Delete each receipt's message unless the receipt is stale (see the module)."""
        local, remote = self._split(pairs)
        removed, stale = await self.delete_here(info, local)
        if remote:
            peers = self._peers()
            assert peers is not None
            for got, refused in await asyncio.gather(
                *(peers.delete_receipts(m, info.name, owned) for m, owned in remote.items())
            ):
                removed += got
                stale += refused
        return removed, stale

    async def delete_here(self, info: QueueInfo, pairs: Pairs) -> Outcome:
        """Check ``pairs`` against this node's deliveries and delete the current ones."""
        st = self._states.get(info.number)
        stale = [i for i, d in pairs if st is not None and st.is_stale(i, d)]
        refused = set(stale)
        ok = list(dict.fromkeys(i for i, _ in pairs if i not in refused))
        if st is not None:
            now = self._clock.monotonic()
            for i in ok:  # no receive may serve it between this check and the delete
                st.hold(i, now, _DELETE_HOLD_S)
        return (await self._delete(info, ok) if ok else []), stale

    async def hold(self, pairs: Sequence[tuple[QueueInfo, int, int]]) -> list[tuple[str, int]]:
        """Check a transaction's receipts, per owning node, and hold the current ones.

        Returns ``(queue, id)`` of every receipt that is not current (see
        :meth:`hold_here`). An owner that does not answer makes the whole call
        a :class:`~dynaq.errors.NotServing` (503, retry): nothing is applied.
        """
        by_queue: dict[str, tuple[QueueInfo, list[tuple[int, int]]]] = {}
        for info, mid, delivery in pairs:
            by_queue.setdefault(info.name, (info, []))[1].append((mid, delivery))
        calls: list[Awaitable[list[int]]] = []
        names: list[str] = []
        stale: list[tuple[str, int]] = []
        for name, (info, qpairs) in by_queue.items():
            local, remote = self._split(qpairs)
            stale += [(name, i) for i in self.hold_here(info, local)]
            if remote:
                peers = self._peers()
                if not isinstance(peers, PeerHolds):
                    raise NotServing("this node cannot reach the nodes that served the receipts")
                for owner, owned in remote.items():
                    calls.append(peers.hold_receipts(owner, name, owned))
                    names.append(name)
        for name, refused in zip(names, await asyncio.gather(*calls), strict=True):
            stale += [(name, i) for i in refused]
        return stale

    def hold_here(self, info: QueueInfo, pairs: Pairs) -> list[int]:
        """Check receipts against this node's deliveries; if every one is current
        (:meth:`~dynaq.core.partitions.QueueState.is_current`), hold them all
        invisible for :data:`TRANSACTION_HOLD_S` and return ``[]``; else hold none
        and return the ids whose receipt is not current. Check and hold take no
        await in between, so no receive here can serve a message between them."""
        st = self._states.get(info.number)
        if st is None:
            return [i for i, _ in pairs]
        now = self._clock.monotonic()
        stale = [i for i, d in pairs if not st.is_current(i, d, now)]
        if not stale:
            for i, _ in pairs:
                st.hold_at_least(i, now, TRANSACTION_HOLD_S)
        return stale

    async def change_visibility(self, info: QueueInfo, pairs: Pairs, vt: float) -> Outcome:
        """Extend or release each receipt's delivery unless the receipt is stale."""
        local, remote = self._split(pairs)
        changed, stale = self.change_visibility_here(info, local, vt)
        if remote:
            peers = self._peers()
            assert peers is not None
            for got, refused in await asyncio.gather(
                *(
                    peers.change_visibility_receipts(m, info.name, owned, vt)
                    for m, owned in remote.items()
                )
            ):
                changed += got
                stale += refused
        return changed, stale

    def change_visibility_here(self, info: QueueInfo, pairs: Pairs, vt: float) -> Outcome:
        st = self._states.get(info.number)
        stale = [i for i, d in pairs if st is not None and st.is_stale(i, d)]
        refused = set(stale)
        ok = [i for i, _ in pairs if i not in refused]
        return (self._change_here(info, ok, vt) if ok else []), stale

    def _split(
        self, pairs: Pairs
    ) -> tuple[list[tuple[int, int]], dict[Member, list[tuple[int, int]]]]:
        """Pairs this node checks, and pairs per owning peer (none without peers)."""
        if self._peers() is None:
            return list(pairs), {}
        mine = self._view.my_slice
        local: list[tuple[int, int]] = []
        remote: dict[Member, list[tuple[int, int]]] = {}
        for i, d in pairs:
            lane = lane_of(i)
            if lane in mine:
                local.append((i, d))
            else:
                remote.setdefault(self._view.owner_of_lane(lane), []).append((i, d))
        return local, remote
