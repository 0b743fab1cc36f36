"""The sections of a node's configuration: one frozen dataclass per ``[section]``.

Each component takes only its own section; only the composition roots see the
whole :class:`dynaq.config.Config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeConfig:
    """Identity of this node in the ring."""

    name: str = "dynaq-1"


@dataclass(frozen=True)
class DataConfig:
    """Where the embedded store keeps its files."""

    dir: str = "./data"


@dataclass(frozen=True)
class HttpConfig:
    """The HTTP API listener and its input limits."""

    host: str = "127.0.0.1"
    port: int = 8081
    max_message_bytes: int = 256 * 1024
    max_request_bytes: int = 16 * 1024 * 1024
    max_batch: int = 1000
    max_receive_bytes: int = 8 * 1024 * 1024
    """A receive stops taking messages once their bodies pass this many bytes (it
    always serves at least one): a receive of 1000 large messages would otherwise
    build a response of hundreds of MiB and hold the event loop meanwhile."""
    shutdown_timeout_s: float = 10.0
    keepalive_timeout_s: float = 60.0
    """An idle keep-alive connection is closed after this long."""
    body_timeout_s: float = 30.0
    """A request body must arrive within this long (408 otherwise)."""
    tls_cert: str = ""
    """PEM certificate chain: with ``tls_key``, the API is served over HTTPS only."""
    tls_key: str = ""
    """PEM private key of ``tls_cert``."""
    tls_ca: str = ""
    """PEM CA bundle peers' HTTPS certificates are verified against ("" = the system's)."""
    workers: int = 0
    """Worker processes serving this node's slice through one port: see
    :mod:`dynaq.node.workers`. ``0`` (the default): one per core (at most 16) where
    several can serve (the embedded store, no ring of machines), else one. ``1``: a
    node of one process. ``N`` > 1 needs the embedded store and no ring."""
    event_loop: str = "uvloop"
    """The node's event loop: ``uvloop`` (libuv: a cheaper loop and socket transport,
    about a sixth less CPU per small request) or ``asyncio`` (the standard library's)."""


@dataclass(frozen=True)
class AuthConfig:
    """Client authentication: bearer tokens and their grants (:mod:`dynaq.core.access`).

    No tokens means no authentication, which a node allows only on a loopback
    ``http.host`` or with ``allow_anonymous = true``. With tokens, every request
    (but ``/health``) needs one, whatever ``allow_anonymous`` says.
    """

    # repr=False: the list holds secrets, and a config may end up in a log or a traceback.
    tokens: list[str] = field(default_factory=list, repr=False)
    allow_anonymous: bool = False


@dataclass(frozen=True)
class LogConfig:
    """Logging: level and format (``json`` for machines, ``text`` for people)."""

    level: str = "info"
    format: str = "json"


@dataclass(frozen=True)
class StorageConfig:
    """Which storage backend this node uses."""

    backend: str = "embedded"


@dataclass(frozen=True)
class EmbeddedConfig:
    """The embedded LMDB store."""

    map_size_mb: int = 64 * 1024
    max_commit_ops: int = 50_000
    read_threads: int = 0  # 0: reads run on the event loop (see dynaq.storage.embedded)
    fill_limit_percent: int = 90
    min_free_disk_mb: int = 64
    writer: str = "thread"
    """Where commits run: "thread" (a thread of the node) or "process" (a process of
    their own, with its own GIL: see dynaq.storage.embedded_writer)."""


@dataclass(frozen=True)
class CassandraConfig:
    """The Cassandra store (cluster deployments)."""

    hosts: list[str] = field(default_factory=lambda: ["127.0.0.1:9042"])
    keyspace: str = "dynaq"
    replication_factor: int = 1
    protocol_version: int = 3
    pool_size: int = 4


@dataclass(frozen=True)
class RiakConfig:
    """The Riak KV store (Dynamiq's ``riaknodes`` and ``backendconnectionpool``)."""

    http: list[str] = field(default_factory=lambda: ["127.0.0.1:8098"])
    """HTTP listeners (``host:port``) the store speaks to, in turn."""
    pb: list[str] = field(default_factory=list)
    """Protocol-buffers listeners: accepted for Dynamiq configs, unused (the store speaks HTTP)."""
    pool_size: int = 64
    """Connections kept open to Riak (all listeners together)."""
    bucket_type: str = "default"
    bucket_prefix: str = "dynaq"
    n_val: int = 3
    request_timeout_s: float = 15.0


@dataclass(frozen=True)
class GossipConfig:
    """The SWIM membership ring."""

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = 7001
    seeds: list[str] = field(default_factory=list)
    key: str = field(default="", repr=False)  # the cluster secret: never in a repr
    preset: str = "lan"
    label: str = "dynaq"
    advertise: str = ""
    advertise_http: str = ""
    allow_node_local_store: bool = False
    """A ring needs one shared store (Cassandra): on node-local stores each node would
    serve only its slice of what it stored itself. True only to test membership."""


@dataclass(frozen=True)
class SyncConfig:
    """How often a node reloads queue and topic config from the store."""

    interval_s: float = 30.0


@dataclass(frozen=True)
class QueueDefaults:
    """Settings a new queue starts with (Dynamiq's defaults)."""

    visibility_timeout_s: float = 30.0
    min_partitions: int = 1
    max_partitions: int = 10
    max_partition_age_s: float = 432_000.0
    compressed_messages: bool = False
    idle_rescan_s: float = 1.0
    dedup_window_s: float = 300.0
    task_retention_s: float = 14 * 86_400.0
    """How long a finished redrive or purge task's record is kept after it ended
    (node-wide, not per queue; AWS lists message move tasks about as long). At
    least ``aws.purge_interval_s``: the latest purge holds the next ``PurgeQueue``."""


@dataclass(frozen=True)
class BatchesConfig:
    """Batch-completion tracking (Carlyle's routes) and its reaper."""

    # Topic that gets {batchId, userKey, completedAt} when a batch completes ("" = none).
    completion_topic: str = ""
    open_max_age_s: float = 7200.0
    closed_max_age_s: float = 604_800.0
    reap_interval_s: float = 60.0
    max_items_per_request: int = 1_000_000


@dataclass(frozen=True)
class AwsConfig:
    """The SQS wire protocol on the node's HTTP address (``POST /``, what AWS SDKs send).

    ``keys`` are ``"KEY_ID:SECRET"`` or ``"KEY_ID:SECRET:token-name"`` (the key gets
    that ``auth.tokens`` token's grants); with keys, every SQS request must be
    SigV4-signed with one of them unless ``anonymous = true``. Without keys, SQS
    requests are let in unsigned only when the node has no ``auth.tokens`` (or
    with ``anonymous = true``). ``region`` goes into queue ARNs.
    ``purge_interval_s``: a ``PurgeQueue`` less than this long after the queue's
    last purge started is refused with ``PurgeQueueInProgress``, as SQS does
    (60 s); 0 lets every purge through (the v2 API's purge is never limited).
    """

    # repr=False: the list holds secrets.
    keys: list[str] = field(default_factory=list, repr=False)
    anonymous: bool = False
    region: str = "us-east-1"
    purge_interval_s: float = 60.0


@dataclass(frozen=True)
class StreamsConfig:
    """Typed persistent streams (Sherlock): segment files under ``<data.dir>/streams/``.

    A segment is finalized when it reaches ``segment_max_bytes``, holds
    ``segment_max_entries`` or is ``segment_max_age_s`` old (Sherlock's defaults:
    10 MB, 100M entries, 24 h). Retention is off by default (0): streams are
    "hardly deleted"; with it, the oldest finalized segments go first.
    """

    segment_max_bytes: int = 10 * 1024 * 1024
    segment_max_entries: int = 100_000_000
    segment_max_age_s: float = 86_400.0
    sparse_index_every: int = 1024
    """One seek point per this many entries of a segment."""
    max_entry_bytes: int = 1024 * 1024
    retention_max_bytes: int = 0
    retention_max_age_s: float = 0.0
    publisher_lease_s: float = 30.0
    """How long a publisher lease lasts unless renewed (the request may ask for less or more)."""
    delete_wait_s: float = 10.0
    """How long deleting a stream waits for its listeners to finish writing."""
    read_threads: int = 4
    listen_chunk_bytes: int = 256 * 1024
    """A listener reads (and writes to its response) at most about this much at a time."""
    listen_idle_check_s: float = 5.0
    """A caught-up listener checks this often whether its client is still connected."""
    replicas: int = 3
    """In a ring: copies of each stream, its authority's included (fewer when the ring is
    smaller)."""
    acks: str = "quorum"
    """When an append is acknowledged in a ring: ``quorum`` (a majority of the copies have
    it fsync'd) or ``leader`` (the authority's fsync alone)."""
    quorum_timeout_s: float = 5.0
    """How long an append waits for its quorum before answering 503 ``replication_timeout``."""


@dataclass(frozen=True)
class StatsConfig:
    """statsd metrics (``type = "none"`` turns them off) and Prometheus's ``/metrics``."""

    type: str = "statsd"
    address: str = "127.0.0.1:8125"
    prefix: str = "dynaq."
    flush_interval_s: float = 1.0
    prometheus: bool = True
    """Serve the same figures, plus latency histograms, at ``GET /metrics``."""


@dataclass(frozen=True)
class OutboxConfig:
    """The transactional-outbox relay: where the table is and how hard to pull.

    ``dsn = ""`` turns the relay off. Defaults are goharvest's: 1000 records in
    flight, marks of 100 rows, 10 ms between empty marks, 500 ms after an I/O
    error, 30 s for a publish to complete before it counts as failed.
    """

    dsn: str = ""
    table: str = "outbox"
    max_in_flight: int = 1000
    mark_batch: int = 100
    mark_backoff_ms: int = 10
    io_error_backoff_ms: int = 500
    queue_timeout_s: float = 30.0
    max_publish_batch: int = 1000
    metrics_interval_s: float = 5.0

    @property
    def enabled(self) -> bool:
        return bool(self.dsn)
