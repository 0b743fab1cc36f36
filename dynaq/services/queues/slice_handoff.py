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

A release the new owner refuses (503: it is leaving too) or never answers
comes back (:meth:`SliceHandoff.take_back`): its entries return to this
node's table instead of being lost, so their messages are not served again
before their deadlines. A node still in the ring sends them on at the next
ring change to whoever then owns their lanes (or serves them, if the lanes
came back); a node already leaving parks them at its stop.

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
from dynaq.core.ids import LANE_SHIFT, LANES
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
        # What recent releases sent: (when, queue, entry). Lanes that come back before
        # their new owner had taken the entries (and so could send them back) are
        # served here again: these entries keep them invisible.
        self._recent: list[tuple[float, str, HandoverEntry]] = []
        self.epoch = 0
        """Ring changes seen so far (:meth:`pass_on` compares it across a take-over)."""
        self.returned: set[int] = set()
        """Ids of entries a release gave back after this node began to leave: its leave
        handover is sent by then, so its stop parks them (see :meth:`take_back`)."""

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
            self.epoch += 1
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
        self._take_back_recent(now, me, after)
        if self.released is not None and (self._in_ring() or restored):
            # Every member a lane went to gets a marker, with or without entries.
            out: dict[str, dict[str, list[HandoverEntry]]] = {n: {} for n in set(given.values())}
            for info in self._catalog.cached_queues():
                st = self._states.get(info.number)
                if st is None:
                    continue
                for mid, f in st.inflight.items():
                    # Entries of lanes given away now, and any a refused release gave
                    # back (lanes another live member owns): each to its lane's owner.
                    owner = after[f.lane]
                    if owner is not None and owner != me and owner in members:
                        entry = HandoverEntry.of(mid, f, now)
                        out.setdefault(owner, {}).setdefault(info.name, []).append(entry)
                        self._recent.append((now, info.name, entry))
            for name, queues in out.items():
                self.released(members[name], me, queues)
        # A marker may come before this node sees the change (the peer saw it first).
        fresh = {p for p in taken_from if now - self._released_at.get(p, -HOLD_S) < self._hold_s}
        self._waiting = taken_from - fresh
        if self._waiting:
            self._hold_until = now + self._hold_s

    def _take_back_recent(self, now: float, me: str, after: list[str | None]) -> None:
        """Entries released within :data:`HOLD_S` whose lanes are this node's again (two
        ring changes close together: a member joined while another came back): the
        member they went to may have taken them only after its own change, too late
        to send them back, so this node holds them again itself. Held twice at
        worst: the other copy sits outside its holder's slice, serving nothing."""
        recent = [r for r in self._recent if now - r[0] < self._hold_s]
        self._recent = [r for r in recent if after[r[2].message_id >> LANE_SHIFT] != me]
        for released_at, name, e in recent:
            if after[e.message_id >> LANE_SHIFT] != me:
                continue
            info = self._catalog.cached_queue(name)
            if info is None:
                continue
            st = self._states.state(info)
            if e.message_id not in st.inflight:
                st.adopt(e, now, max(0.0, e.seconds_left - (now - released_at)))

    def take_back(self, queues: dict[str, list[HandoverEntry]]) -> None:
        """Entries a release did not deliver (its new owner refused them, 503, since it
        is leaving too; or did not answer): back into this node's table, so their
        messages stay invisible until their deadlines instead of being served again
        at once. A message in flight here again meanwhile keeps its own state."""
        now = self._clock.monotonic()
        leaving = self._leaving()
        taken = 0
        for name, entries in queues.items():
            info = self._catalog.cached_queue(name)
            if info is None:
                continue  # deleted meanwhile: nothing of it is served
            st = self._states.state(info)
            for e in entries:
                if e.message_id in st.inflight:
                    continue
                st.adopt(e, now, e.seconds_left)
                taken += 1
                if leaving:
                    self.returned.add(e.message_id)
        if taken:
            log.info("lane handoff returned", extra={"messages": taken, "leaving": leaving})

    def pass_on(self, queue: str, ids: Sequence[int], epoch: int) -> None:
        """Entries of a lane handoff just taken over, when the ring changed during the
        take-over (its store read): that change's release went out without them, so
        those whose lanes it gave another member go on to it now, as the release
        would have sent them (left here, outside this node's slice, nobody would
        hold them invisible). ``epoch``: :attr:`epoch` as the take-over began. With
        no change meanwhile, entries of lanes this node does not own yet stay: the
        handoff came before this node saw the change that gives it those lanes."""
        info = self._catalog.cached_queue(queue)
        st = self._states.get(info.number) if info is not None else None
        if st is None or self.released is None or self._leaving() or epoch == self.epoch:
            return
        me = self._view.me.name
        members = {m.name: m for m in self._view.members}
        owners = _owners(sorted(members))
        now = self._clock.monotonic()
        out: dict[str, list[HandoverEntry]] = {}
        for mid in ids:
            f = st.inflight.get(mid)
            owner = owners[f.lane] if f is not None else None
            if f is None or owner is None or owner == me:
                continue
            out.setdefault(owner, []).append(HandoverEntry.of(mid, f, now))
        for owner, entries in out.items():
            st.forget_all(e.message_id for e in entries)
            self.released(members[owner], me, {queue: entries})
            log.info(
                "handed-over entries passed on",
                extra={"queue": queue, "to": owner, "messages": len(entries)},
            )
