"""Builds the membership agent and the writer-slot lease from the node's config.

Only :mod:`dynaq.node` (and test launchers) call these. Gossip runs when
``gossip.enabled`` is true or seeds are given; otherwise the node is a ring of
one on writer slot 0.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from dynaq.clock import Clock
from dynaq.cluster.base import Membership, StaticMembership
from dynaq.cluster.slots import WriterSlots
from dynaq.config import Config
from dynaq.core.membership import MembershipView
from dynaq.storage.base import Store

_ANY_HOST = ("", "0.0.0.0", "::", "[::]")


def gossip_enabled(config: Config) -> bool:
    """Whether this node joins a ring (gossip on, or seeds given)."""
    return config.gossip.enabled or bool(config.gossip.seeds)


def advertised_http(config: Config, port: int) -> str:
    """The HTTP address other nodes use to reach this one (``gossip.advertise_http``,
    else ``http.host:port``, with a wildcard host replaced by this machine's name)."""
    override = config.gossip.advertise_http
    if override:
        return override if ":" in override else f"{override}:{port}"
    host = config.http.host
    if host in _ANY_HOST:
        host = socket.gethostname()
    return f"{host}:{port}"


def build_membership(config: Config, view: MembershipView) -> Membership:
    """A SWIM membership when gossip is on, else the static single-node ring."""
    if not gossip_enabled(config):
        return StaticMembership(view)
    from dynaq.cluster.swim import SwimMembership, SwimSettings

    g = config.gossip
    settings = SwimSettings(
        bind=f"{g.host}:{g.port}",
        seeds=list(g.seeds),
        secret=g.key,
        label=g.label,
        preset=g.preset,
        advertise=g.advertise,
    )
    return SwimMembership(view, settings)


def build_writer_slots(
    config: Config,
    store: Store,
    clock: Clock,
    membership: Membership,
    on_lost: Callable[[], None],
) -> WriterSlots | None:
    """The writer-slot lease for a cluster node; ``None`` for a single node (slot 0)."""
    if not gossip_enabled(config):
        return None
    return WriterSlots(store, config.node.name, clock, live=membership.live_names, on_lost=on_lost)
