"""Reading a :class:`Config` from TOML with ``DYNAQ_*`` overrides, range-checked."""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

from dynaq.config.sections import (
    AuthConfig,
    AwsConfig,
    BatchesConfig,
    CassandraConfig,
    DataConfig,
    EmbeddedConfig,
    GossipConfig,
    HttpConfig,
    LogConfig,
    NodeConfig,
    OutboxConfig,
    QueueDefaults,
    RiakConfig,
    StatsConfig,
    StorageConfig,
    StreamsConfig,
    SyncConfig,
)
from dynaq.errors import InvalidInput


@dataclass(frozen=True)
class Config:
    """The whole configuration of one node."""

    node: NodeConfig = field(default_factory=NodeConfig)
    data: DataConfig = field(default_factory=DataConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    log: LogConfig = field(default_factory=LogConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    embedded: EmbeddedConfig = field(default_factory=EmbeddedConfig)
    cassandra: CassandraConfig = field(default_factory=CassandraConfig)
    riak: RiakConfig = field(default_factory=RiakConfig)
    gossip: GossipConfig = field(default_factory=GossipConfig)
    sync: SyncConfig = field(default_factory=SyncConfig)
    queues: QueueDefaults = field(default_factory=QueueDefaults)
    stats: StatsConfig = field(default_factory=StatsConfig)
    outbox: OutboxConfig = field(default_factory=OutboxConfig)
    batches: BatchesConfig = field(default_factory=BatchesConfig)
    streams: StreamsConfig = field(default_factory=StreamsConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    aws: AwsConfig = field(default_factory=AwsConfig)


ENV_PREFIX = "DYNAQ_"


CONFIG_ENV = "DYNAQ_CONFIG"
"""Names the config file when ``--config`` does not (the flag wins)."""


def load_config(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read ``path`` (TOML; when ``None``, the file ``DYNAQ_CONFIG`` names, if any) and
    apply ``DYNAQ_*`` overrides from ``env`` (the process's environment when ``None``).

    Raises :class:`InvalidInput` naming the setting when a value has the wrong
    type or a key is unknown, so a typo never silently falls back to a default,
    and naming the file when it cannot be read (an empty ``DYNAQ_CONFIG`` too:
    a variable meant to name a file never silently means "no file").
    """
    environ = os.environ if env is None else env
    origin = "--config"
    if path is None and CONFIG_ENV in environ:
        path, origin = environ[CONFIG_ENV], CONFIG_ENV
        if not str(path).strip():
            raise InvalidInput(f"{CONFIG_ENV} is set but empty (unset it, or name a TOML file)")
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                raw = tomllib.load(f)
        except OSError as exc:
            raise InvalidInput(
                f"config file {str(path)!r} ({origin}) cannot be read: {exc.strerror or exc}"
            ) from None
    return config_from_mapping(raw, environ)


def config_from_mapping(raw: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Config:
    """Build a :class:`Config` from parsed TOML and optional env overrides."""
    sections: dict[str, Any] = {}
    hints = get_type_hints(Config)
    for name, value in raw.items():
        if name not in hints:
            raise InvalidInput(f"unknown config section [{name}]")
        if not isinstance(value, Mapping):
            raise InvalidInput(f"config section [{name}] must be a table")
        sections[name] = dict(value)
    for key, value in (env or {}).items():
        if not key.startswith(ENV_PREFIX) or _not_a_setting(key):
            continue
        section, _, setting = key[len(ENV_PREFIX) :].lower().partition("_")
        fields = get_type_hints(hints[section]) if section in hints else {}
        if setting not in fields:
            # A typo must not silently run the node on a default (say, the
            # embedded store instead of the Cassandra ring it was meant for).
            raise InvalidInput(
                f"environment variable {key} names no setting "
                f"(DYNAQ_<SECTION>_<SETTING>, e.g. DYNAQ_HTTP_PORT)"
            )
        sections.setdefault(section, {})[setting] = _from_env(key, value, fields[setting])
    built: dict[str, Any] = {}
    for name, values in sections.items():
        built[name] = _build_section(name, hints[name], values)
    config = Config(**built)
    check_ranges(config)
    return config


# DYNAQ_* variables that are no setting: the CLI and client (endpoint, token),
# the config file's name (read by load_config itself), a node's supervisor (its
# workers' role), the test harness and benchmarks, and HAProxy's config.
_OTHER_PROGRAMS = ("DYNAQ_ENDPOINT", "DYNAQ_TOKEN", CONFIG_ENV, "DYNAQ_WORKER_ROLE")
_OTHER_PREFIXES = ("DYNAQ_TESTING_", "DYNAQ_BENCH_", "DYNAQ_LB_")


def _not_a_setting(key: str) -> bool:
    if key in _OTHER_PROGRAMS or key.startswith(_OTHER_PREFIXES):
        return True
    # HAProxy's DYNAQ_NODE_1..N (config/haproxy.cfg): backend addresses.
    return key.startswith("DYNAQ_NODE_") and key[len("DYNAQ_NODE_") :].isdecimal()


STATS_TYPES = ("statsd", "none")
"""What ``stats.type`` may be (Prometheus's ``/metrics`` is ``stats.prometheus``)."""

_DAY_S = 86_400.0
_RANGES: dict[str, tuple[float, float]] = {
    "http.port": (0, 65_535),
    "http.max_message_bytes": (1, 64 * 1024 * 1024),
    "http.max_request_bytes": (1024, 1024 * 1024 * 1024),
    "http.max_batch": (1, 10_000),
    "http.max_receive_bytes": (1, 1024 * 1024 * 1024),
    "http.shutdown_timeout_s": (0, 3_600),
    "http.keepalive_timeout_s": (0.1, 3_600),
    "http.body_timeout_s": (0.1, 3_600),
    "http.workers": (0, 16),
    "embedded.map_size_mb": (1, 64 * 1024 * 1024),
    "embedded.max_commit_ops": (1, 10_000_000),
    "embedded.read_threads": (0, 256),
    "embedded.fill_limit_percent": (10, 100),
    "embedded.min_free_disk_mb": (0, 1024 * 1024),
    "cassandra.replication_factor": (1, 32),
    "cassandra.protocol_version": (3, 5),
    "cassandra.pool_size": (1, 256),
    "riak.pool_size": (1, 4096),
    "riak.n_val": (1, 16),
    "riak.request_timeout_s": (0.1, 3_600),
    "gossip.port": (0, 65_535),
    "sync.interval_s": (0.05, _DAY_S),
    "queues.visibility_timeout_s": (0, 43_200),
    "queues.min_partitions": (1, 1024),
    "queues.max_partitions": (1, 1024),
    "queues.max_partition_age_s": (1, 365 * _DAY_S),
    "queues.idle_rescan_s": (0.01, 3_600),
    "queues.dedup_window_s": (1, 14 * _DAY_S),
    "queues.task_retention_s": (60, 365 * _DAY_S),
    "batches.open_max_age_s": (1, 365 * _DAY_S),
    "batches.closed_max_age_s": (1, 365 * _DAY_S),
    "batches.reap_interval_s": (0, _DAY_S),
    "batches.max_items_per_request": (1, 100_000_000),
    "streams.segment_max_bytes": (4096, 4 * 1024**3),
    "streams.segment_max_entries": (1, 2**40),
    "streams.segment_max_age_s": (0.001, 365 * _DAY_S),
    "streams.sparse_index_every": (1, 1_000_000),
    "streams.max_entry_bytes": (16, 64 * 1024 * 1024),
    "streams.retention_max_bytes": (0, 2**50),
    "streams.retention_max_age_s": (0, 100 * 365 * _DAY_S),
    "streams.publisher_lease_s": (0.1, _DAY_S),
    "streams.delete_wait_s": (0, 3_600),
    "streams.read_threads": (1, 256),
    "streams.listen_chunk_bytes": (1024, 64 * 1024 * 1024),
    "streams.listen_idle_check_s": (0.01, 3_600),
    "streams.replicas": (1, 9),
    "streams.quorum_timeout_s": (0.01, 600),
    "stats.flush_interval_s": (0.01, 3_600),
    "aws.purge_interval_s": (0, _DAY_S),
    "outbox.max_in_flight": (1, 1_000_000),
    "outbox.mark_batch": (1, 100_000),
    "outbox.mark_backoff_ms": (0, 60_000),
    "outbox.io_error_backoff_ms": (0, 600_000),
    "outbox.queue_timeout_s": (0.01, 3_600),
    "outbox.max_publish_batch": (1, 100_000),
    "outbox.metrics_interval_s": (0.01, 3_600),
}
"""Inclusive ranges of numeric settings; every float must also be finite."""


def check_ranges(config: Config) -> None:
    """Refuse out-of-range, NaN and infinite settings, naming the setting.

    A zero sync interval would spin, a port of 70000 would crash at bind, a
    NaN timeout would make every comparison false: all are caught here, at
    start-up, as "bad configuration".
    """
    for section in dataclasses.fields(config):
        values = getattr(config, section.name)
        for f in dataclasses.fields(values):
            where = f"{section.name}.{f.name}"
            value = getattr(values, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if isinstance(value, float) and not math.isfinite(value):
                raise InvalidInput(f"setting {where} must be a finite number, got {value}")
            lo, hi = _RANGES.get(where, (0, float("inf")))
            if not lo <= value <= hi:
                raise InvalidInput(
                    f"setting {where} must be in {_bound(lo)}..{_bound(hi)}, got {value}"
                )
    if config.streams.acks not in ("quorum", "leader"):
        raise InvalidInput(
            f"setting streams.acks must be quorum or leader, got {config.streams.acks!r}"
        )
    for listener in (*config.riak.http, *config.riak.pb):
        _, sep, port = listener.rpartition(":")
        if not sep or not port.isdecimal() or int(port) > 65_535:
            raise InvalidInput(f"settings riak.http and riak.pb take host:port, got {listener!r}")
    if config.storage.backend == "riak" and not config.riak.http:
        raise InvalidInput("setting riak.http needs at least one host:port (the store speaks HTTP)")
    if config.log.level.lower() not in ("debug", "info", "warning", "error", "critical"):
        raise InvalidInput(
            "setting log.level must be debug, info, warning, error or critical, "
            f"got {config.log.level!r}"
        )
    if config.log.format not in ("json", "text"):
        raise InvalidInput(f"setting log.format must be json or text, got {config.log.format!r}")
    name = config.node.name
    if not name or name != name.strip() or not name.isprintable():
        raise InvalidInput(
            f"setting node.name must be a non-empty printable name without surrounding "
            f"spaces, got {name!r}"
        )
    if config.embedded.writer not in ("thread", "process"):
        raise InvalidInput(
            f"setting embedded.writer must be thread or process, got {config.embedded.writer!r}"
        )
    h = config.http
    if h.event_loop not in ("uvloop", "asyncio"):
        raise InvalidInput(
            f"setting http.event_loop must be uvloop or asyncio, got {h.event_loop!r}"
        )
    if bool(h.tls_cert) != bool(h.tls_key):
        raise InvalidInput(
            "settings http.tls_cert and http.tls_key go together: set both or neither"
        )
    q = config.queues
    if q.min_partitions > q.max_partitions:
        raise InvalidInput("setting queues.min_partitions must not exceed queues.max_partitions")
    if q.task_retention_s < config.aws.purge_interval_s:
        # A swept purge record would let the next PurgeQueue in early.
        raise InvalidInput(
            f"setting queues.task_retention_s must be at least aws.purge_interval_s "
            f"({config.aws.purge_interval_s:g}), got {q.task_retention_s:g}"
        )
    if not config.data.dir.strip():
        # "" would put the store, the streams and the LOCK file in the current directory.
        raise InvalidInput("setting data.dir must name a directory, got ''")
    if config.stats.type not in STATS_TYPES:
        raise InvalidInput(
            f"setting stats.type must be statsd or none, got {config.stats.type!r} "
            "(Prometheus is stats.prometheus, on by default)"
        )
    _, sep, port = config.stats.address.rpartition(":")
    if config.stats.type == "statsd" and (not sep or not port.isdecimal() or int(port) > 65_535):
        raise InvalidInput(f"setting stats.address must be host:port, got {config.stats.address!r}")


def _build_section(name: str, cls: type[Any], values: Mapping[str, Any]) -> Any:
    types_ = get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in types_:
            raise InvalidInput(f"unknown setting {key!r} in config section [{name}]")
        kwargs[key] = _check_type(f"{name}.{key}", value, types_[key])
    return cls(**kwargs)


def _check_type(where: str, value: Any, expected: Any) -> Any:
    origin = get_origin(expected)
    if origin in (Union, types.UnionType):
        for option in get_args(expected):
            try:
                return _check_type(where, value, option)
            except InvalidInput:
                continue
        raise InvalidInput(f"setting {where} has the wrong type")
    if origin is list:
        (item_type,) = get_args(expected)
        if not isinstance(value, list):
            raise InvalidInput(f"setting {where} must be a list")
        return [_check_type(where, v, item_type) for v in value]
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if expected is int and isinstance(value, bool):
        raise InvalidInput(f"setting {where} must be an integer")
    if isinstance(expected, type) and not isinstance(value, expected):
        raise InvalidInput(f"setting {where} must be of type {expected.__name__}")
    return value


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _from_env(key: str, value: str, expected: Any) -> Any:
    if expected is bool and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    try:
        if expected is bool:
            raise ValueError(value)  # noqa: TRY301 - one message for every bad value
        if expected is int:
            return int(value)
        if expected is float:
            return float(value)
        if get_origin(expected) is list:
            return [item.strip() for item in value.split(",") if item.strip()]
    except ValueError:
        raise InvalidInput(f"environment variable {key}={value!r} has the wrong type") from None
    return value


def _bound(x: float) -> str:
    """A range bound as written in the config: ``67108864``, ``0.5``, ``inf`` (``:g``
    printed 6.71089e+07)."""
    if math.isfinite(x) and x == int(x):
        return str(int(x))
    return f"{x}"
