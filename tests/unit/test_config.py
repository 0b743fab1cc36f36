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
            "DYNAQ_UNRELATED": "ignored",
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
    ],
)
def test_bad_config_names_the_setting(
    raw: dict[str, object], env: dict[str, str], needle: str
) -> None:
    with pytest.raises(InvalidInput, match=None) as exc:
        config_from_mapping(raw, env)
    assert needle in str(exc.value)
