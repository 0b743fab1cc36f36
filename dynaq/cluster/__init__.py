"""Cluster membership: who is in the ring, and which writer slot this node holds.

* :class:`~dynaq.cluster.base.Membership` is dynaq's own small interface; the
  node talks only to it, so the SWIM library behind it can be replaced.
* :class:`~dynaq.cluster.base.StaticMembership` is the single-node ring.
* :class:`~dynaq.cluster.swim.SwimMembership` runs kinship (SWIM + Lifeguard)
  and feeds :class:`~dynaq.core.membership.MembershipView` on every change.
* :class:`~dynaq.cluster.slots.WriterSlots` leases one of the 32 id writer
  slots through the shared store.
* :mod:`~dynaq.cluster.hints` sends hints and the graceful-leave handover to
  peers. Which of these a node runs is decided by :mod:`dynaq.node`.
"""

from dynaq.cluster.base import Membership, StaticMembership
from dynaq.cluster.slots import WriterSlots
from dynaq.errors import SlotLost  # re-exported: callers of WriterSlots catch it

__all__ = [
    "Membership",
    "SlotLost",
    "StaticMembership",
    "WriterSlots",
]
