"""The node's parts, built from its configuration: the store, metrics, membership, slots."""

from __future__ import annotations

import logging
import math
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dynaq.clock import Clock
from dynaq.cluster.base import Membership, StaticMembership
from dynaq.cluster.slots import WriterSlots
from dynaq.config import Config
from dynaq.core import keys
from dynaq.core.membership import MembershipView
from dynaq.core.peer_auth import PeerSigner, PeerVerifier, derive_peer_key
from dynaq.errors import InvalidInput
from dynaq.metrics import FanoutMetrics, NullMetrics, StatsdMetrics, Telemetry
from dynaq.prometheus import PrometheusMetrics
from dynaq.storage.base import Store

if TYPE_CHECKING:
    from dynaq.cluster.swim import SwimSettings

log = logging.getLogger(__name__)

SCHEMA_VERSION = b"1"
_ANY_HOST = ("", "0.0.0.0", "::", "[::]")


def build_store(
    config: Config,
    *,
    version_tag: int = 0,
    version_tags: int = 1,
    writer_address: str | None = None,
    count_messages: bool = False,
) -> Store:
    """The store the config names (backends are imported only when chosen).

    ``version_tag`` of ``version_tags``: which of a node's workers opens the
    embedded store; ``writer_address``: the node's shared writer process, if its
    workers have one; ``count_messages``: the embedded store keeps each queue's
    message count (a node of several workers: see
    :class:`~dynaq.storage.embedded.LmdbStore`)."""
    backend = config.storage.backend
    if backend == "embedded":
        from dynaq.storage.embedded import LmdbStore

        e = config.embedded
        return LmdbStore(
            Path(config.data.dir) / "lmdb",
            map_size=e.map_size_mb * 1024 * 1024,
            max_commit_ops=e.max_commit_ops,
            read_threads=e.read_threads,
            fill_limit=e.fill_limit_percent / 100,
            min_free_disk=e.min_free_disk_mb * 1024 * 1024,
            growth_prefixes=keys.GROWTH_PREFIXES,
            added_prefixes=keys.ADDED_PREFIXES,
            version_tag=version_tag,
            version_tags=version_tags,
            writer=e.writer,
            writer_address=writer_address,
            count_messages=count_messages,
        )
    if backend == "memory":
        from dynaq.storage.memory import MemoryStore

        return MemoryStore()
    if backend == "cassandra":
        from dynaq.storage.cassandra import CassandraStore

        c = config.cassandra
        return CassandraStore(
            c.hosts,
            keyspace=c.keyspace,
            replication_factor=c.replication_factor,
            protocol_version=c.protocol_version,
            pool_size=c.pool_size,
            # Dedup windows timed by Cassandra's clock, not by each node's.
            expire_prefixes={keys.DEDUP: math.ceil(config.queues.dedup_window_s)},
        )
    if backend == "riak":
        from dynaq.storage.riak import RiakStore

        r = config.riak
        return RiakStore(
            r.http,
            bucket_prefix=r.bucket_prefix,
            bucket_type=r.bucket_type,
            n_val=r.n_val,
            pool_size=r.pool_size,
            request_timeout_s=r.request_timeout_s,
        )
    check_backend(config)
    raise AssertionError(backend)  # check_backend refused it


STORAGE_BACKENDS = ("embedded", "cassandra", "riak", "memory")


def check_backend(config: Config) -> None:
    """:class:`InvalidInput` unless ``storage.backend`` names a backend dynaq has."""
    backend = config.storage.backend
    if backend not in STORAGE_BACKENDS:
        raise InvalidInput(
            f"unknown storage backend {backend!r}; use "
            + ", ".join(repr(b) for b in STORAGE_BACKENDS[:-1])
            + f" or {STORAGE_BACKENDS[-1]!r}"
        )


def check_config(config: Config) -> None:
    """Every check of ``config`` that needs more than the config itself knows (the
    backends, the gossip presets, the tokens the SQS keys name, the TLS files, what
    several workers can do): :class:`InvalidInput` naming the setting, raised before
    anything opens, binds or locks. The CLI runs it before a node starts, so every
    configuration mistake is "bad configuration", exit 2, not a failure at start-up.
    """
    from dynaq.api.aws.sigv4 import parse_keys
    from dynaq.api.tls import peer_ssl_context, server_ssl_context
    from dynaq.cluster.swim import check_preset, check_settings
    from dynaq.core.access import access_policy
    from dynaq.node.workers import check_workers

    check_backend(config)
    access = access_policy(config.auth, config.http.host)  # the tokens parse
    parse_keys(config.aws.keys, {} if access is None else {t.name: t for t in access.tokens})
    server_ssl_context(config.http)  # the certificate and key load
    # A typo in the preset is refused even with gossip off (it would bite when turned on).
    check_preset(config.gossip.preset)
    if gossip_enabled(config):
        check_settings(swim_settings(config))
        check_ring_store(config, store_given=False)
        peer_ssl_context(config.http)
    if config.outbox.enabled:
        from dynaq.outbox.schema import quote_table

        quote_table(config.outbox.table)  # a name PostgreSQL would refuse
    check_workers(config)


def build_metrics(config: Config, clock: Clock) -> Telemetry:
    """statsd (``stats.type``) and Prometheus (``stats.prometheus``), either, both or none."""
    s = config.stats
    targets: list[Telemetry] = []
    if s.type == "statsd":
        targets.append(StatsdMetrics(s.address, s.prefix, s.flush_interval_s, clock))
    elif s.type != "none":
        raise InvalidInput(f"unknown stats type {s.type!r}; use 'statsd' or 'none'")
    if s.prometheus:
        targets.append(PrometheusMetrics())
    if not targets:
        return NullMetrics()
    return targets[0] if len(targets) == 1 else FanoutMetrics(*targets)


def gossip_enabled(config: Config) -> bool:
    """Whether this node joins a ring (gossip on, or seeds given)."""
    return config.gossip.enabled or bool(config.gossip.seeds)


def check_ring_store(config: Config, *, store_given: bool) -> None:
    """Refuse a ring on node-local stores: each node would serve only its slice of
    what it stored itself, stranding the rest (unless membership alone is tested)."""
    local = config.storage.backend in ("embedded", "memory") and not store_given
    if gossip_enabled(config) and local and not config.gossip.allow_node_local_store:
        raise InvalidInput(
            f"a ring needs one shared store: storage.backend = {config.storage.backend!r} keeps "
            "messages on each node, and each node serves only its slice of the ring. Use "
            "backend = 'cassandra' or 'riak' (set gossip.allow_node_local_store = true only to test "
            "membership)"
        )


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


def build_peer_auth(config: Config, clock: Clock) -> tuple[PeerSigner, PeerVerifier] | None:
    """Signer and verifier of node-to-node requests, keyed from ``gossip.key``; ``None``
    without a key (``/internal/`` then refuses everything, and no hints are sent)."""
    if not config.gossip.key:
        if gossip_enabled(config):
            log.warning(
                "gossip.key is not set: hints and the in-flight handover between nodes are "
                "off (set a shared secret; a ring beyond loopback requires one anyway)"
            )
        return None
    key = derive_peer_key(config.gossip.key)
    return PeerSigner(key, clock.wall_ms), PeerVerifier(key, clock.wall_ms)


def build_membership(config: Config, view: MembershipView) -> Membership:
    """A SWIM membership when gossip is on (imported only then), else the ring of one."""
    if not gossip_enabled(config):
        return StaticMembership(view)
    from dynaq.cluster.swim import SwimMembership

    return SwimMembership(view, swim_settings(config))


def swim_settings(config: Config) -> SwimSettings:
    """The SWIM agent's settings, from ``[gossip]``."""
    from dynaq.cluster.swim import SwimSettings

    g = config.gossip
    return SwimSettings(
        bind=f"{g.host}:{g.port}",
        seeds=list(g.seeds),
        secret=g.key,
        label=g.label,
        preset=g.preset,
        advertise=g.advertise,
    )


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


async def migrate(store: Store) -> bool:
    """Prepare a store for this version of dynaq; return whether anything was written."""
    changed = await store.migrate_schema()
    item = await store.get(keys.SCHEMA)
    if item is None:
        await store.put_if_absent(keys.SCHEMA, SCHEMA_VERSION)
        return True
    if item.value != SCHEMA_VERSION:
        raise InvalidInput(f"store schema {item.value!r} is not supported by this dynaq")
    return changed
