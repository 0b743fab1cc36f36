"""Builds the stream service of a node (its files live under ``<data.dir>/streams``) and,
in a ring, how its streams are forwarded and copied."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from dynaq.api.stream_proxy import StreamForwarder
from dynaq.clock import Clock
from dynaq.cluster.stream_link import HttpAuthorityLink
from dynaq.config import Config
from dynaq.core.membership import MembershipView
from dynaq.core.peer_auth import PeerSigner
from dynaq.storage.base import Store
from dynaq.streams import StreamService
from dynaq.streams.authority import StreamAuthority
from dynaq.streams.replicas import CopySizes, Followers


def build_streams(config: Config, clock: Clock, worker: int = 0) -> StreamService:
    """One stream service per node (streams are node-local: see the README); each
    worker of a node has its own directory (worker 0 the node's), and the ring of
    workers records which one serves each stream."""
    name = "streams" if worker == 0 else f"streams-w{worker}"
    return StreamService(Path(config.data.dir) / name, config.streams, clock)


@dataclass
class StreamRing:
    """How a node serves streams in a ring (or a node of workers): the forwarder to
    each stream's authority, the link its copies follow over, and its copies."""

    forwarder: StreamForwarder
    copies: CopySizes
    link: HttpAuthorityLink | None
    followers: Followers | None


def build_stream_ring(
    config: Config,
    store: Store,
    view: MembershipView,
    clock: Clock,
    streams: StreamService,
    signer: PeerSigner | None,
    peer_ssl: ssl.SSLContext | None,
    *,
    worker: bool,
) -> StreamRing:
    """Each stream is served by one member, recorded in the shared store; the others
    forward its requests there. Without a peer signer no copies are kept."""
    authority = StreamAuthority(store, view, clock)
    sc = config.streams
    # A node's workers share its disk: a copy on another worker would cost every
    # append a second fsync and a hop, and save nothing a restart does not.
    replicas = 1 if worker else sc.replicas
    ring = StreamRing(
        StreamForwarder(authority, peer_ssl),
        CopySizes(view, clock, replicas, sc.acks == "quorum"),
        None,
        None,
    )
    if signer is not None:
        ring.link = HttpAuthorityLink(signer, view.me.name, peer_ssl)
        authority.probe = ring.link
        ring.followers = Followers(streams, authority, ring.link, view, clock, replicas)
    return ring
