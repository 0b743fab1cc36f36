"""In-flight state follows lanes that move to a live member (a join or a rejoin).

A node serves its slice from its own in-flight table; the table is not stored.
When a member joins, part of each slice moves to it, and the joiner knew
nothing of the messages the previous owner had handed to consumers: it would
serve them again at once, their visibility timeouts notwithstanding (a
rolling restart redelivered all the work consumers were doing). So on every
ring change:

* a node that loses lanes to a member that is alive sends that member its
  in-flight entries for those lanes (deadline left, receive count, group,
  attributes), then a *release* marker (one per peer, even with no entries);
  a node still joining sends every member it sees an empty one (members that
  join together each take lanes from the other);
* a node that gains lanes from a member that is still alive serves nothing
  (receives answer empty, long polls wait) until each such member's marker
  has arrived, or :data:`HOLD_S` has passed (a marker lost, a peer of an
  older version): then it serves, as before this existed.

Lanes gained from a member that left or died have no one to wait for: its
graceful leave handed its in-flight table over before it left (see
:meth:`~dynaq.services.queues.handover.HintRouter.handover`), a crash lost it
(at-least-once: served again). Handed-over entries keep their delivery
number: the previous owner's current receipts still delete them, and receipts of
earlier deliveries are still refused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from dynaq.clock import Clock
from dynaq.core.hints import HandoverEntry
from dynaq.core.ids import LANES
from dynaq.core.keyspace import slices
from dynaq.core.membership import Member, MembershipView
from dynaq.services.catalog import Catalog
from dynaq.services.queues.state import QueueStates

log = logging.getLogger(__name__)

HOLD_S = 2.0
"""Longest a node waits for a live previous owner's in-flight entries after a ring
change gave it lanes (gossip reaches both within a second on a healthy ring)."""

Released = Callable[[Member, str, dict[str, list[HandoverEntry]]], None]
"""Sends ``(new owner, this node's name, {queue: entries})`` and then the release
marker to the new owner (see :mod:`dynaq.cluster.hints`)."""


def _owners(names: Sequence[str]) -> list[str | None]:
    """The owner of each lane when ``names`` are the ring's members."""
    out: list[str | None] = [None] * LANES
    for name, rng in slices(names).items():
        out[rng.lo : rng.hi] = [name] * (rng.hi - rng.lo)
    return out


class SliceHandoff:
    """Hands in-flight state over with moving lanes, and holds serving until it came."""

    def __init__(
        self,
        view: MembershipView,
        catalog: Catalog,
        states: QueueStates,
        clock: Clock,
        in_ring: Callable[[], bool],
        hold_s: float = HOLD_S,
        leaving: Callable[[], bool] = lambda: False,
    ) -> None:
        self._view = view
        self._catalog = catalog
        self._states = states
        self._clock = clock
        self._in_ring = in_ring
        self._hold_s = hold_s
        self._leaving = leaving
        self._members = [view.me.name]
        self._released_at: dict[str, float] = {}
        self._waiting: set[str] = set()
        self._hold_until = float("-inf")
        self.released: Released | None = None
        """Set on a node with peers (:meth:`QueueService.set_peer_hints`)."""

    def holding(self) -> bool:
        """Whether this node must not serve yet: it waits for the in-flight entries of
        lanes it gained from members that are still alive."""
        if not self._waiting:
            return False
        if self._clock.monotonic() < self._hold_until:
            return True
        log.warning("in-flight handover not received", extra={"peers": sorted(self._waiting)})
        self._waiting.clear()
        return False

    def note_released(self, peer: str) -> None:
        """``peer`` sent all it had in flight in lanes it gave this node."""
        self._released_at[peer] = self._clock.monotonic()
        if peer in self._waiting:
            self._waiting.discard(peer)
            if not self._waiting:
                for st in self._states:
                    st.signal.set()  # long polls held meanwhile go on now

    def ring_changed(self) -> None:
        """The live set changed: hand over lanes given away, hold for lanes taken,
        then recut every queue's partitions to the new slice. Not on a node that is
        leaving: it handed its table over (or parks what was refused), and members
        leaving around it must not move or drop its entries."""
        if self._leaving():
            return
        me = self._view.me.name
        members = {m.name: m for m in self._view.members}
        new = sorted(members)
        old, self._members = self._members, new
        if old != new:
            joining = not self._in_ring()
            # A joiner owned nothing before, unless it took back the in-flight state
            # its ring parked at a whole-ring stop: then it held every lane's entries,
            # and gives each member those of its lanes.
            restored = joining and old == [me] and any(st.inflight for st in self._states)
            if joining and old == [me] and not restored:
                old = [n for n in new if n != me]
            self._hand_over(me, _owners(old), _owners(new), members, restored)
            if joining and self.released is not None:
                # A joiner holds nothing in flight: it tells every member so, since
                # one that joins at the same moment takes lanes from it too.
                for name in new:
                    if name != me:
                        self.released(members[name], me, {})
        self._states.relayout()

    def _hand_over(
        self,
        me: str,
        before: list[str | None],
        after: list[str | None],
        members: dict[str, Member],
        restored: bool = False,
    ) -> None:
        now = self._clock.monotonic()
        given: dict[int, str] = {}  # lane -> the live member it goes to
        taken_from: set[str] = set()
        for lane, (was, now_owner) in enumerate(zip(before, after, strict=True)):
            if was == me and now_owner is not None and now_owner != me:
                given[lane] = now_owner
            elif now_owner == me and was is not None and was != me and was in members:
                taken_from.add(was)
        if given and self.released is not None and (self._in_ring() or restored):
            out: dict[str, dict[str, list[HandoverEntry]]] = {n: {} for n in set(given.values())}
            for info in self._catalog.cached_queues():
                st = self._states.get(info.number)
                if st is None:
                    continue
                for mid, f in st.inflight.items():
                    owner = given.get(f.lane)
                    if owner is not None:
                        # An expired entry goes too (visible at once there): it carries
                        # the message's receive count toward its dead-letter limit.
                        entry = HandoverEntry(
                            mid,
                            max(0.0, f.deadline - now),
                            f.receive_count,
                            f.group,
                            f.attributes,
                            f.delivery,
                        )
                        out[owner].setdefault(info.name, []).append(entry)
            for name, queues in out.items():
                self.released(members[name], me, queues)
        # A marker may come before this node sees the change (the peer saw it first).
        fresh = {p for p in taken_from if now - self._released_at.get(p, -HOLD_S) < self._hold_s}
        self._waiting = taken_from - fresh
        if self._waiting:
            self._hold_until = now + self._hold_s
