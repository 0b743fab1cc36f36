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
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, runtime_checkable

from dynaq.clock import Clock
from dynaq.core.ids import lane_of
from dynaq.core.membership import Member
from dynaq.errors import DynaqError, NotServing
from dynaq.services.catalog import QueueInfo
from dynaq.services.queues.state import QueueStates

Pairs = Sequence[tuple[int, int]]
"""``(message_id, delivery)`` per receipt."""
Outcome = tuple[list[int], list[int]]
"""Ids acted on, and ids whose receipt was stale."""
Claim = tuple[QueueInfo, int, int]
"""``(queue, message_id, delivery)``: one input of a transaction."""
Refused = tuple[list[int], list[int]]
"""Ids whose receipt is not current, and ids whose delivery another transaction has
claimed (it is committing: its outcome decides)."""

log = logging.getLogger(__name__)

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

    async def hold_receipts(
        self, owner: Member, queue: str, pairs: Pairs, *, release: bool = False
    ) -> Refused: ...


class ReceiptActions:
    """Receipt-checked deletes and visibility changes for one node."""

    def __init__(
        self,
        states: QueueStates,
        owner_of: Callable[[int], Member | None],
        clock: Clock,
        delete: Callable[[QueueInfo, list[int]], Awaitable[list[int]]],
        change_here: Callable[[QueueInfo, list[int], float], list[int]],
        peers: Callable[[], PeerReceipts | None],
    ) -> None:
        self._states = states
        self._owner_of = owner_of
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
        if not ok:
            return [], stale
        now = self._clock.monotonic()
        before: dict[int, float] = {}  # each held delivery's own deadline
        if st is not None:
            for i in ok:  # no receive may serve it between this check and the delete
                f = st.inflight.get(i)
                if f is not None:
                    before[i] = f.deadline
                st.hold(i, now, _DELETE_HOLD_S)
        try:
            return await self._delete(info, ok), stale
        except BaseException:
            # Not deleted (or not known to be): the client is told to retry, and
            # the delivery goes back to its own visibility timeout rather than
            # staying hidden for the rest of the hold.
            if st is not None:
                for i, deadline in before.items():
                    st.end_hold(i, deadline, now + _DELETE_HOLD_S)
            raise

    async def hold(
        self, pairs: Sequence[Claim]
    ) -> tuple[set[tuple[str, int]], set[tuple[str, int]], list[Claim]]:
        """Check a transaction's receipts, per owning node, and claim the current ones.

        Returns ``(queue, id)`` of every receipt that is not current and of every
        one another transaction has claimed (see :meth:`hold_here`), and the
        receipts claimed (release them with
        :meth:`release` if the transaction does not commit). An owner that does
        not answer makes the call a :class:`~dynaq.errors.NotServing` (503,
        retry), after the claims made elsewhere are released.
        """
        groups: list[tuple[Member | None, QueueInfo, list[tuple[int, int]]]] = []
        for info, owned in self._by_queue(pairs).values():
            local, remote = self._split(owned)
            if local:
                groups.append((None, info, local))
            groups += [(m, info, p) for m, p in remote.items()]
        answers = await asyncio.gather(
            *(self._hold_at(owner, info, p) for owner, info, p in groups),
            return_exceptions=True,
        )
        stale: set[tuple[str, int]] = set()
        busy: set[tuple[str, int]] = set()
        claimed: list[Claim] = []
        failed: BaseException | None = None
        for (_, info, p), answer in zip(groups, answers, strict=True):
            if isinstance(answer, BaseException):
                failed = failed or answer
            elif answer[0] or answer[1]:
                stale.update((info.name, i) for i in answer[0])
                busy.update((info.name, i) for i in answer[1])
            else:
                claimed += [(info, i, d) for i, d in p]
        if failed is not None:
            await self.release(claimed)
            raise failed
        return stale, busy, claimed

    async def _hold_at(
        self, owner: Member | None, info: QueueInfo, pairs: list[tuple[int, int]]
    ) -> Refused:
        if owner is None:
            return self.hold_here(info, pairs)
        peers = self._peers()
        if not isinstance(peers, PeerHolds):
            raise NotServing("this node cannot reach the nodes that served the receipts")
        return await peers.hold_receipts(owner, info.name, pairs)

    async def release(self, claims: Sequence[Claim]) -> None:
        """Release claims of a transaction that did not commit (best effort: a claim
        that cannot be released ends with its hold)."""
        calls: list[Awaitable[Refused]] = []
        for info, owned in self._by_queue(claims).values():
            local, remote = self._split(owned)
            self.hold_here(info, local, release=True)
            peers = self._peers()
            if remote and isinstance(peers, PeerHolds):
                calls += [
                    peers.hold_receipts(m, info.name, p, release=True) for m, p in remote.items()
                ]
        for answer in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(answer, DynaqError):
                log.warning("could not release a transaction's claim: %s", answer)
            elif isinstance(answer, BaseException):
                raise answer

    def hold_here(self, info: QueueInfo, pairs: Pairs, *, release: bool = False) -> Refused:
        """Check receipts against this node's deliveries; if every one is current
        (:meth:`~dynaq.core.partitions.QueueState.is_current`), claim them all and
        hold them invisible for at least :data:`TRANSACTION_HOLD_S`, and return
        ``([], [])``; else claim none and return the ids whose receipt is not
        current, and apart those whose delivery another transaction has claimed.
        Check and claim take no await in between, so no receive here can serve a
        message, and no other transaction claim it, between them. ``release``:
        release those claims instead."""
        st = self._states.get(info.number)
        if release:
            if st is not None:
                for i, d in pairs:
                    st.release_claim(i, d)
            return [], []
        if st is None:
            return [i for i, _ in pairs], []
        now = self._clock.monotonic()
        refused = [(i, d) for i, d in pairs if not st.is_current(i, d, now)]
        if not refused:
            for i, _ in pairs:
                st.claim(i, now, TRANSACTION_HOLD_S)
            return [], []
        busy = [i for i, d in refused if st.is_claimed(i, d, now)]
        taken = set(busy)
        return [i for i, _ in refused if i not in taken], busy

    @staticmethod
    def _by_queue(
        claims: Sequence[Claim],
    ) -> dict[str, tuple[QueueInfo, list[tuple[int, int]]]]:
        out: dict[str, tuple[QueueInfo, list[tuple[int, int]]]] = {}
        for info, mid, delivery in claims:
            out.setdefault(info.name, (info, []))[1].append((mid, delivery))
        return out

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
        local: list[tuple[int, int]] = []
        remote: dict[Member, list[tuple[int, int]]] = {}
        for i, d in pairs:
            owner = self._owner_of(lane_of(i))
            if owner is None:
                local.append((i, d))
            else:
                remote.setdefault(owner, []).append((i, d))
        return local, remote
