"""Cluster coordination of queue state: hints to slice owners, in-flight handover.

Hints are best effort: without them the owner still finds new messages on its
next rescan and learns of deletes when the visibility timeout expires; hints
make both immediate, which matters for message groups. The handover runs
before a graceful leave so the next owners keep in-flight messages invisible
until their deadlines instead of serving them again while their consumers are
still working on them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from dynaq.clock import Clock
from dynaq.core import keys
from dynaq.core.hints import HandoverEntry
from dynaq.core.ids import lane_of
from dynaq.core.keyspace import slices
from dynaq.core.membership import Member, MembershipView
from dynaq.core.messages import Message
from dynaq.errors import NotServing, QueueNotFound
from dynaq.services.catalog import Catalog, QueueInfo
from dynaq.services.queues.state import QueueStates
from dynaq.storage.base import Store


class PeerHints(Protocol):
    """Sends hints to the node that owns a slice (implemented in :mod:`dynaq.cluster.hints`)."""

    def deleted(self, owner: Member, queue: str, ids: list[int]) -> None: ...

    def enqueued(
        self, owner: Member, queue: str, lanes: list[int], rewind: Sequence[int] = ()
    ) -> None: ...

    def released(self, owner: Member, me: str, queues: dict[str, list[HandoverEntry]]) -> None: ...

    def on_returned(self, take_back: Callable[[dict[str, list[HandoverEntry]]], None]) -> None:
        """Give ``take_back`` the entries of a release that did not reach its owner."""

    def recheck(self, owner: Member, queue: str) -> None: ...


@runtime_checkable
class PeerVisibility(Protocol):
    """Forwards a visibility change to the node that serves the messages' slice."""

    async def change_visibility(
        self, owner: Member, queue: str, ids: list[int], visibility_timeout_s: float
    ) -> list[int]: ...

    async def slice_stats(self, owner: Member, queue: str) -> dict[str, Any]: ...

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

    async def delete_receipts(
        self, owner: Member, queue: str, pairs: Sequence[tuple[int, int]]
    ) -> tuple[list[int], list[int]]: ...

    async def change_visibility_receipts(
        self,
        owner: Member,
        queue: str,
        pairs: Sequence[tuple[int, int]],
        visibility_timeout_s: float,
    ) -> tuple[list[int], list[int]]: ...


Handover = dict[Member, dict[str, list[HandoverEntry]]]
"""In-flight messages per next owner, per queue."""


class HintRouter:
    """Routes this node's writes to the owners of other slices, and applies theirs."""

    def __init__(
        self,
        view: MembershipView,
        catalog: Catalog,
        states: QueueStates,
        clock: Clock,
        store: Store,
    ) -> None:
        self._store = store
        self._view = view
        self._catalog = catalog
        self._states = states
        self._clock = clock
        self._peers: PeerHints | None = None
        self._next_owners: dict[int, Member] | None = None
        """Set once this node handed its in-flight table over to leave: who serves each
        lane after it (its own table no longer decides a receipt or a visibility)."""

    def set_peers(self, peers: PeerHints) -> None:
        """Forward hints through ``peers`` from now on (a cluster node)."""
        self._peers = peers

    def owner_of(self, lane: int) -> Member | None:
        """The member whose in-flight table decides ``lane`` (``None``: this node's).
        Once this node has handed its table over to leave, that is the lane's next
        owner: a receipt's delete or a visibility change that reaches it meanwhile
        (its peers still route to it until they see it leave) goes where the entry went."""
        if self._next_owners is not None:
            return self._next_owners[lane]
        if lane in self._view.my_slice:
            return None
        return self._view.owner_of_lane(lane)

    def next_owner_name(self, lane: int) -> str | None:
        """After :meth:`handover`: the member that serves ``lane`` next."""
        return None if self._next_owners is None else self._next_owners[lane].name

    def _remote_owners(self, lanes: Iterable[int]) -> dict[Member, list[int]]:
        out: dict[Member, list[int]] = {}
        for lane in lanes:
            owner = self.owner_of(lane)
            if owner is not None:
                out.setdefault(owner, []).append(lane)
        return out

    def enqueued(self, info: QueueInfo, lanes: Iterable[int], rewind: Sequence[int] = ()) -> None:
        """Messages were written into ``lanes``: wake their owners; ``rewind``: ids of
        group messages written, which their owners' scans must not have passed."""
        if self._peers is None:
            return
        for owner, owned in self._remote_owners(lanes).items():
            mine = set(owned)
            back = [i for i in rewind if lane_of(i) in mine]
            self._peers.enqueued(owner, info.name, owned, back)

    def deleted(self, info: QueueInfo, removed: Sequence[int]) -> None:
        """Messages were deleted here: tell their owners, which may have them in flight."""
        if self._peers is None or not removed:
            return
        by_lane: dict[int, list[int]] = {}
        for i in removed:
            by_lane.setdefault(lane_of(i), []).append(i)
        for owner, owned in self._remote_owners(by_lane).items():
            self._peers.deleted(owner, info.name, [i for ln in owned for i in by_lane[ln]])

    def purged(self, info: QueueInfo) -> None:
        """A purge removed messages of ``info`` here without reading their ids: the
        other members check theirs in flight (they would stay counted, and block
        their groups, until their deadlines)."""
        if self._peers is None:
            return
        for m in self._view.members:
            if m.name != self._view.me.name:
                self._peers.recheck(m, info.name)

    async def recheck_in_flight(self, queue: str) -> None:
        """Forget in-flight entries of ``queue`` whose messages are gone from the store."""
        info = self._catalog.cached_queue(queue)
        st = None if info is None else self._states.get(info.number)
        if info is None or st is None or not st.inflight:
            return
        ids = list(st.inflight)
        token = st.begin_read()
        try:
            items = await self._store.get_many([keys.message(info.number, i) for i in ids])
        finally:
            st.end_read(token)
        st.forget_all([i for i, item in zip(ids, items, strict=True) if item is None])

    def apply_hints(
        self,
        queue: str,
        deleted: Sequence[int],
        lanes: Sequence[int],
        rewind: Sequence[int] = (),
    ) -> None:
        """Apply hints from a peer: messages deleted there, lanes written there, group
        messages written there (scans restart no later than each)."""
        info = self._catalog.cached_queue(queue)
        if info is None:
            return
        st = self._states.get(info.number)
        if st is None:
            return
        if deleted:
            st.note_deleted(deleted)
            for i in deleted:
                st.forget(i)
        for lane in lanes:
            st.note_enqueued(lane)
        for i in rewind:
            st.note_group_written(i)

    def _refuse_if_leaving(self) -> None:
        if self._next_owners is not None:
            # This node handed its own table over (it is leaving) while a lookup
            # ran: entries taken now would be lost at its exit. Refused (503), the
            # sender parks them instead.
            raise NotServing("this node is leaving: it takes no in-flight handover")

    def handover(self) -> Handover:
        """This node's in-flight messages, grouped by the member that serves each
        message's lane once this node has left the ring. From then on receipts and
        visibility changes of those lanes go to those members (:meth:`owner_of`)."""
        me = self._view.me.name
        others = {m.name: m for m in self._view.members if m.name != me}
        if not others:
            return {}
        new = slices(list(others))
        owner_of = {
            lane: others[name] for name, rng in new.items() for lane in range(rng.lo, rng.hi)
        }
        self._next_owners = owner_of
        now = self._clock.monotonic()
        out: Handover = {}
        for name in self._catalog.queue_names():
            info = self._catalog.cached_queue(name)
            st = self._states.get(info.number) if info is not None else None
            if st is None:
                continue
            for mid, f in st.inflight.items():
                entry = HandoverEntry.of(mid, f, now)
                out.setdefault(owner_of[f.lane], {}).setdefault(name, []).append(entry)
        return out

    async def apply_handover(self, queue: str, entries: Sequence[HandoverEntry]) -> None:
        """Take over in-flight messages from a peer that leaves, or gives this node
        their lanes (see :meth:`handover`, :mod:`.slice_handoff`). A message already
        in flight here keeps its own state (this node served it meanwhile). A taken
        entry keeps its delivery number (0, unknown, from an older peer: then any
        receipt of it is taken), so the previous owner's current receipts still
        work and its earlier ones are still refused. A queue this node has not
        looked up yet (a node that just joined) is read from the store first.

        An entry whose message is gone from the store is not taken: the sender
        deleted it after computing the handover, and its "deleted" hint, sent
        apart, came first (its forget found nothing). Taken, the entry would hold
        its group back until its deadline, up to a delete's 30 s hold."""
        try:
            info = await self._catalog.queue(queue)
        except QueueNotFound:
            return  # deleted meanwhile: nothing of it is served
        self._refuse_if_leaving()
        st = self._states.state(info)
        token = st.begin_read()  # a "deleted" hint applied during the read is seen too
        try:
            stored = await self._store.get_many(
                [keys.message(info.number, e.message_id) for e in entries]
            )
        finally:
            st.end_read(token)
        self._refuse_if_leaving()
        now = self._clock.monotonic()
        for e, item in zip(entries, stored, strict=True):
            if item is None or st.deleted_since(e.message_id, token) or e.message_id in st.inflight:
                continue
            st.adopt(e, now, e.seconds_left)
        if any(e.seconds_left <= 0 for e in entries):
            st.signal.set()  # visible already: a long poll here serves it now
