"""A node's workers: the role a supervisor hands each worker and the config it runs with."""

from __future__ import annotations

import os

import pytest

from dynaq.config import config_from_mapping
from dynaq.errors import InvalidInput
from dynaq.node.workers import (
    WorkerRole,
    check_workers,
    role_from_env,
    worker_config,
    worker_count,
)

ROLE = WorkerRole(1, (7101, 7102, 7103), (8101, 8102, 8103), 9000, "s3cret", parent=42)


def test_role_round_trips_through_its_environment_variable() -> None:
    assert role_from_env({"DYNAQ_WORKER_ROLE": ROLE.encode()}) == ROLE
    assert role_from_env({}) is None
    with pytest.raises(InvalidInput, match="DYNAQ_WORKER_ROLE"):
        role_from_env({"DYNAQ_WORKER_ROLE": '{"index": 1}'})


def test_the_role_variable_is_not_taken_for_a_setting() -> None:
    config = config_from_mapping(
        {}, {"DYNAQ_WORKER_ROLE": ROLE.encode(), "DYNAQ_HTTP_WORKERS": "2"}
    )
    assert config.http.workers == 2


def test_worker_config_makes_a_loopback_ring_member_on_the_shared_port() -> None:
    base = config_from_mapping({"node": {"name": "n"}, "http": {"workers": 3, "port": 0}})
    c = worker_config(base, ROLE)
    assert c.node.name == "n-w1"
    assert c.http.port == 9000 and c.http.workers == 1
    g = c.gossip
    assert g.enabled and g.host == "127.0.0.1" and g.port == 7102
    assert g.seeds == ["127.0.0.1:7101", "127.0.0.1:7103"]
    assert g.advertise_http == "127.0.0.1:8102"
    assert g.key == "s3cret" and g.allow_node_local_store
    assert c.data.dir == base.data.dir  # one store for all workers


def test_worker_count_and_what_workers_refuse() -> None:
    assert worker_count(config_from_mapping({}), cores=6) == 6  # the default: one per core
    # 0: one per core where several can serve, else one (never refused).
    auto = {"http": {"workers": 0}}
    assert worker_count(config_from_mapping(auto), cores=6) == 6
    assert worker_count(config_from_mapping(auto), cores=1) == 1
    assert worker_count(config_from_mapping(auto)) == len(os.sched_getaffinity(0))
    cassandra = config_from_mapping({**auto, "storage": {"backend": "cassandra"}})
    assert worker_count(cassandra, cores=6) == 1
    check_workers(cassandra)
    ring = config_from_mapping({**auto, "gossip": {"seeds": ["127.0.0.1:7946"]}})
    assert worker_count(ring, cores=6) == 1
    check_workers(ring)
    assert worker_count(config_from_mapping(auto), cores=6) == 6
    assert worker_count(config_from_mapping({"http": {"workers": 0}}), cores=64) == 16
    with pytest.raises(InvalidInput, match=r"http\.workers"):
        config_from_mapping({"http": {"workers": 17}})
    check_workers(config_from_mapping({"http": {"workers": 2}}))
    with pytest.raises(InvalidInput, match="embedded"):
        check_workers(
            config_from_mapping({"http": {"workers": 2}, "storage": {"backend": "cassandra"}})
        )
    with pytest.raises(InvalidInput, match="ring of machines"):
        check_workers(config_from_mapping({"http": {"workers": 2}, "gossip": {"enabled": True}}))
