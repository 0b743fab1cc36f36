"""Cluster membership: who is in the ring, and which writer slot this node holds.

* :class:`~dynaq.cluster.base.Membership` is dynaq's own small interface; the
  node talks only to it, so the SWIM library behind it can be replaced.
* :class:`~dynaq.cluster.base.StaticMembership` is the single-node ring.
* :class:`~dynaq.cluster.swim.SwimMembership` runs kinship (SWIM + Lifeguard)
  and feeds :class:`~dynaq.core.membership.MembershipView` on every change.
* :class:`~dynaq.cluster.slots.WriterSlots` leases one of the 32 id writer
  slots through the shared store.
* :func:`~dynaq.cluster.wiring.build_membership` picks one from the config.
"""

from dynaq.cluster.base import Membership, StaticMembership
from dynaq.cluster.slots import WriterSlots
from dynaq.cluster.wiring import (
    advertised_http,
    build_membership,
    build_writer_slots,
    gossip_enabled,
)
from dynaq.errors import SlotLost  # re-exported: callers of WriterSlots catch it

__all__ = [
    "Membership",
    "SlotLost",
    "StaticMembership",
    "WriterSlots",
    "advertised_http",
    "build_membership",
    "build_writer_slots",
    "gossip_enabled",
]
