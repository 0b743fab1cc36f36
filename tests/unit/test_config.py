"""Config: TOML sections, env overrides with types, precise errors."""

from __future__ import annotations

import pytest

from dynaq.config import config_from_mapping
from dynaq.errors import InvalidInput


def test_defaults() -> None:
    c = config_from_mapping({})
    assert c.http.port == 8081 and c.queues.visibility_timeout_s == 30.0
    assert c.stats.prefix == "dynaq." and c.sync.interval_s == 30.0


def test_env_overrides_every_type() -> None:
    c = config_from_mapping(
        {"http": {"port": 1}},
        {
            "DYNAQ_HTTP_PORT": "9000",
            "DYNAQ_DATA_DIR": "/tmp/x",
            "DYNAQ_NODE_NAME": "n2",
            "DYNAQ_LOG_LEVEL": "debug",
            "DYNAQ_SYNC_INTERVAL_S": "1",
            "DYNAQ_GOSSIP_SEEDS": "127.0.0.1:7001, 127.0.0.1:7002",
            "DYNAQ_GOSSIP_ENABLED": "yes",
            "DYNAQ_STORAGE_BACKEND": "memory",
            "DYNAQ_ENDPOINT": "http://127.0.0.1:8081",  # the CLI's, not the server's
            "DYNAQ_TESTING_CACHE_DIR": "/tmp",
            "DYNAQ_NODE_1": "dynaq-1:8081",  # HAProxy's
            "OTHER": "ignored",
        },
    )
    assert c.http.port == 9000
    assert c.data.dir == "/tmp/x" and c.node.name == "n2" and c.log.level == "debug"
    assert c.sync.interval_s == 1.0
    assert c.gossip.seeds == ["127.0.0.1:7001", "127.0.0.1:7002"] and c.gossip.enabled
    assert c.storage.backend == "memory"


@pytest.mark.parametrize(
    ("raw", "env", "needle"),
    [
        ({"http": {"port": "x"}}, {}, "http.port"),
        ({"http": {"port": True}}, {}, "http.port"),
        ({"nope": {}}, {}, "[nope]"),
        ({"http": {"nope": 1}}, {}, "'nope'"),
        ({"http": 5}, {}, "[http]"),
        ({}, {"DYNAQ_HTTP_PORT": "eighty"}, "DYNAQ_HTTP_PORT"),
        ({}, {"DYNAQ_GOSSIP_ENABLED": "maybe"}, "DYNAQ_GOSSIP_ENABLED"),
        ({}, {"DYNAQ_STORAGE_BAKEND": "cassandra"}, "DYNAQ_STORAGE_BAKEND"),
        ({}, {"DYNAQ_HTTP_PROT": "9"}, "DYNAQ_HTTP_PROT"),
        ({}, {"DYNAQ_GOSIP_SEEDS": "a:1"}, "DYNAQ_GOSIP_SEEDS"),
        ({}, {"DYNAQ_UNRELATED": "x"}, "DYNAQ_UNRELATED"),
        ({}, {"DYNAQ_SYNC_INTERVAL_S": "0"}, "sync.interval_s"),
        ({}, {"DYNAQ_SYNC_INTERVAL_S": "nan"}, "sync.interval_s"),
        ({}, {"DYNAQ_STATS_FLUSH_INTERVAL_S": "inf"}, "stats.flush_interval_s"),
        ({}, {"DYNAQ_HTTP_PORT": "70000"}, "http.port"),
        ({}, {"DYNAQ_HTTP_PORT": "-5"}, "http.port"),
        ({}, {"DYNAQ_HTTP_MAX_BATCH": "0"}, "http.max_batch"),
        ({}, {"DYNAQ_EMBEDDED_READ_THREADS": "-1"}, "embedded.read_threads"),
        ({}, {"DYNAQ_HTTP_EVENT_LOOP": "trio"}, "http.event_loop"),
        ({}, {"DYNAQ_QUEUES_VISIBILITY_TIMEOUT_S": "-10"}, "visibility_timeout_s"),
        ({"queues": {"min_partitions": 50, "max_partitions": 2}}, {}, "min_partitions"),
        ({}, {"DYNAQ_STATS_ADDRESS": "localhost"}, "stats.address"),
        ({}, {"DYNAQ_QUEUES_TASK_RETENTION_S": "59"}, "queues.task_retention_s must be in 60.."),
        (
            {},
            {"DYNAQ_HTTP_MAX_MESSAGE_BYTES": "999999999999"},
            "http.max_message_bytes must be in 1..67108864, got 999999999999",
        ),
        ({}, {"DYNAQ_QUEUES_TASK_RETENTION_S": "nan"}, "queues.task_retention_s"),
        ({}, {"DYNAQ_QUEUES_TASK_RETENTION_S": "2 weeks"}, "DYNAQ_QUEUES_TASK_RETENTION_S"),
        ({"queues": {"task_retention_s": "14d"}}, {}, "queues.task_retention_s"),
        ({}, {"DYNAQ_LOG_LEVEL": "verbose"}, "log.level must be debug, info"),
        ({}, {"DYNAQ_LOG_LEVEL": "10"}, "log.level"),
        ({}, {"DYNAQ_LOG_FORMAT": "xml"}, "log.format must be json or text"),
        ({}, {"DYNAQ_NODE_NAME": ""}, "node.name must be a non-empty"),
        ({}, {"DYNAQ_NODE_NAME": " n1"}, "node.name"),
        ({}, {"DYNAQ_EMBEDDED_WRITER": "fork"}, "embedded.writer must be thread or process"),
    ],
)
def test_bad_config_names_the_setting(
    raw: dict[str, object], env: dict[str, str], needle: str
) -> None:
    with pytest.raises(InvalidInput, match=None) as exc:
        config_from_mapping(raw, env)
    assert needle in str(exc.value)


def test_task_retention_defaults_to_14_days_and_must_cover_the_purge_interval() -> None:
    assert config_from_mapping({}).queues.task_retention_s == 14 * 86_400.0
    env = {"DYNAQ_QUEUES_TASK_RETENTION_S": "3600", "DYNAQ_AWS_PURGE_INTERVAL_S": "3600"}
    assert config_from_mapping({}, env).queues.task_retention_s == 3600.0
    # A purge record swept before the interval ends would let the next PurgeQueue in.
    with pytest.raises(InvalidInput) as exc:
        config_from_mapping({"queues": {"task_retention_s": 600}, "aws": {"purge_interval_s": 900}})
    assert str(exc.value) == (
        "setting queues.task_retention_s must be at least aws.purge_interval_s (900), got 600"
    )
