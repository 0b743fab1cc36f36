"""The composition root: builds the store, the services and the HTTP site, and owns every task.

Only this package and :mod:`dynaq.cli` know concrete classes. :mod:`.builders`
makes the parts from the configuration; :mod:`.root` holds :class:`Node`, which
starts and stops them in order.
"""

from dynaq.node.builders import (
    advertised_http,
    build_membership,
    build_metrics,
    build_peer_auth,
    build_store,
    build_writer_slots,
    check_ring_store,
    gossip_enabled,
    migrate,
)
from dynaq.node.root import Node
from dynaq.node.run import run_node

__all__ = [
    "Node",
    "advertised_http",
    "build_membership",
    "build_metrics",
    "build_peer_auth",
    "build_store",
    "build_writer_slots",
    "check_ring_store",
    "gossip_enabled",
    "migrate",
    "run_node",
]
