"""docker-compose.yml cannot run here (no Docker engine), so it is checked by reading.

Every service's mounted files and build files exist; every published port is
unique; every name one service uses to reach another (Cassandra hosts, gossip
seeds, statsd, HAProxy's servers, Grafana's datasource) is a service of the
file listening on that port; and the node config parses with dynaq's own
loader under each node's environment.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dynaq.config import Config, load_config
from dynaq.testing.process import ROOT

COMPOSE = ROOT / "docker-compose.yml"
NODES = ("dynaq-1", "dynaq-2", "dynaq-3")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def _services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    services = compose["services"]
    assert isinstance(services, dict)
    return services


def _mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        out.append((source, target))
    return out


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    assert isinstance(env, dict), "environment must be a mapping"
    # ${VAR:?message} interpolations: stand in a value, as the user must.
    return {k: re.sub(r"\$\{[^}]*\}", "secret", str(v)) for k, v in env.items()}


def _node_config(services: dict[str, dict[str, Any]], name: str) -> Config:
    (config_mount,) = [s for s, t in _mounts(services[name]) if t == "/etc/dynaq/dynaq.toml"]
    return load_config(ROOT / config_mount, env=_env(services[name]))


def test_every_service_is_there(compose: dict[str, Any]) -> None:
    assert {*NODES, "cassandra", "haproxy", "statsd", "grafana", "dynaq-migrate"} <= set(
        _services(compose)
    )


def test_mounted_and_built_files_exist(compose: dict[str, Any]) -> None:
    named_volumes = set(compose.get("volumes", {}))
    for name, service in _services(compose).items():
        for source, target in _mounts(service):
            if source.startswith("."):
                assert (ROOT / source).is_file(), f"{name}: {source} does not exist"
                assert target.startswith("/")
            else:
                assert source in named_volumes, f"{name}: volume {source} is not declared"
        build = service.get("build")
        if build is not None:
            assert (ROOT / build["context"] / build["dockerfile"]).is_file()
        for dep in service.get("depends_on", []):
            assert dep in _services(compose), f"{name} depends on unknown {dep}"


def test_published_ports_are_unique_and_well_formed(compose: dict[str, Any]) -> None:
    host_ports: list[int] = []
    for name, service in _services(compose).items():
        for port in service.get("ports", []):
            host, container = str(port).split(":")
            assert 0 < int(host) < 65536 and 0 < int(container) < 65536, name
            host_ports.append(int(host))
    assert len(host_ports) == len(set(host_ports))
    lb_env = _env(_services(compose)["haproxy"])
    published = {str(p).split(":")[1] for p in _services(compose)["haproxy"]["ports"]}
    assert lb_env["DYNAQ_LB_BIND"].rsplit(":", 1)[1] in published


def test_nodes_reach_each_other_and_their_dependencies_by_name(compose: dict[str, Any]) -> None:
    services = _services(compose)
    for name in NODES:
        config = _node_config(services, name)
        assert config.node.name == name
        assert config.storage.backend == "cassandra"
        assert config.cassandra.hosts == ["cassandra:9042"]
        assert config.gossip.enabled and config.gossip.key  # the secret comes from env
        assert config.auth.tokens  # reachable beyond loopback: client tokens are required
        assert sorted(s.split(":")[0] for s in config.gossip.seeds) == sorted(NODES)
        assert {s.split(":")[1] for s in config.gossip.seeds} == {str(config.gossip.port)}
        assert config.stats.address.split(":")[0] in services
        assert config.http.host == "0.0.0.0"
        env = _env(services[name])
        assert env["DYNAQ_GOSSIP_ADVERTISE_HTTP"] == f"{name}:{config.http.port}"
        test = " ".join(services[name]["healthcheck"]["test"])
        assert f":{config.http.port}/health" in test


def test_haproxy_balances_the_three_nodes_with_health_checks(compose: dict[str, Any]) -> None:
    services = _services(compose)
    lb = services["haproxy"]
    (cfg_source,) = [s for s, t in _mounts(lb) if t.endswith("haproxy.cfg")]
    cfg = (ROOT / cfg_source).read_text()
    assert "option httpchk GET /health" in cfg and "balance roundrobin" in cfg
    env = _env(lb)
    port = _node_config(services, "dynaq-1").http.port
    for i, name in enumerate(NODES, start=1):
        assert f'"${{DYNAQ_NODE_{i}-{name}:{port}}}" check' in cfg
        assert env[f"DYNAQ_NODE_{i}"] == f"{name}:{port}"


def test_grafana_reads_the_graphite_behind_statsd(compose: dict[str, Any]) -> None:
    services = _services(compose)
    (source,) = [s for s, t in _mounts(services["grafana"]) if "/datasources/" in t]
    datasources = yaml.safe_load((ROOT / source).read_text())["datasources"]
    for ds, image in zip(datasources, ("graphite", "prometheus"), strict=True):
        host = ds["url"].split("//")[1].split(":")[0]
        assert host in services and image in services[host]["image"]


def test_config_files_are_the_repository_ones() -> None:
    assert Path(ROOT / "config" / "haproxy.cfg").is_file()
    assert Path(ROOT / "config" / "cluster" / "dynaq.toml").is_file()
