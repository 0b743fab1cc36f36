"""Node configuration: frozen dataclasses, read from TOML with ``DYNAQ_*`` overrides.

Every setting ``[section] key`` can be overridden by the environment variable
``DYNAQ_<SECTION>_<KEY>`` (upper case), e.g. ``DYNAQ_HTTP_PORT=8082`` or
``DYNAQ_DATA_DIR=/var/lib/dynaq``. Environment values are parsed to the type the
setting has (int, float, bool, list of strings). The environment is read only
by :func:`load_config`, which only the CLI calls.
"""

from dynaq.config.load import ENV_PREFIX, Config, check_ranges, config_from_mapping, load_config
from dynaq.config.sections import (
    AuthConfig,
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

__all__ = [
    "ENV_PREFIX",
    "AuthConfig",
    "BatchesConfig",
    "CassandraConfig",
    "Config",
    "DataConfig",
    "EmbeddedConfig",
    "GossipConfig",
    "HttpConfig",
    "LogConfig",
    "NodeConfig",
    "OutboxConfig",
    "QueueDefaults",
    "RiakConfig",
    "StatsConfig",
    "StorageConfig",
    "StreamsConfig",
    "SyncConfig",
    "check_ranges",
    "config_from_mapping",
    "load_config",
]
