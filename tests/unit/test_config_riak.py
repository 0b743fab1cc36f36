"""The [riak] section: TOML, DYNAQ_RIAK_* overrides, range checks, and the store it builds."""

from __future__ import annotations

import pytest

from dynaq.config import config_from_mapping
from dynaq.errors import InvalidInput
from dynaq.node.builders import build_store


def test_riak_section_from_toml_and_env() -> None:
    raw = {"storage": {"backend": "riak"}, "riak": {"http": ["10.0.0.1:8098"], "pool_size": 8}}
    config = config_from_mapping(raw)
    assert config.riak.http == ["10.0.0.1:8098"] and config.riak.pool_size == 8
    env = {
        "DYNAQ_STORAGE_BACKEND": "riak",
        "DYNAQ_RIAK_HTTP": "a:8098, b:8098",
        "DYNAQ_RIAK_PB": "a:8087,b:8087",
        "DYNAQ_RIAK_POOL_SIZE": "32",
    }
    config = config_from_mapping({}, env)
    assert config.storage.backend == "riak"
    assert config.riak.http == ["a:8098", "b:8098"] and config.riak.pb == ["a:8087", "b:8087"]
    assert config.riak.pool_size == 32


@pytest.mark.parametrize(
    ("riak", "message"),
    [
        ({"pool_size": 0}, "riak.pool_size"),
        ({"n_val": 0}, "riak.n_val"),
        ({"http": ["nohost"]}, "host:port"),
        ({"pb": ["h:99999"]}, "host:port"),
        ({"http": []}, "riak.http"),
        ({"request_timeout_s": float("nan")}, "finite"),
    ],
)
def test_riak_settings_are_checked(riak: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        config_from_mapping({"storage": {"backend": "riak"}, "riak": riak})


def test_build_store_makes_a_riak_store() -> None:
    from dynaq.storage.riak import RiakStore

    config = config_from_mapping({"storage": {"backend": "riak"}, "riak": {"n_val": 1}})
    store = build_store(config)
    assert isinstance(store, RiakStore)
    assert store.bucket_props()["dynaq_kv"]["n_val"] == 1
