"""The node's preflight, on a real ``dynaq server`` process: every configuration mistake
(the file ``DYNAQ_CONFIG`` names, a ``DYNAQ_*`` variable, a flag) is ``dynaq: bad
configuration: …``, exit 2, before anything starts (no data directory, no LOCK file,
no writer slot), and ``DYNAQ_CONFIG`` names the config file as ``--config`` does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from dynaq.testing.process import free_port, node_process

ROOT = Path(__file__).resolve().parents[2]


def _server(
    tmp_path: Path, extra_env: dict[str, str], args: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``dynaq server ARGS`` in an empty working directory, with only the ``DYNAQ_*``
    variables given (and a data directory under ``tmp_path``)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
    env.update(
        {
            "DYNAQ_HTTP_PORT": str(free_port()),
            "DYNAQ_DATA_DIR": str(tmp_path / "d"),
            "DYNAQ_STATS_TYPE": "none",
            "PYTHONPATH": str(ROOT),
            **extra_env,
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "dynaq", "server", *(args or [])],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("extra_env", "says"),
    [
        ({"DYNAQ_CONFIG": "/nonexistent/dynaq.toml"}, "'/nonexistent/dynaq.toml' (DYNAQ_CONFIG)"),
        ({"DYNAQ_CONFIG": ""}, "DYNAQ_CONFIG is set but empty"),
        ({"DYNAQ_GOSSIP_PRESET": "bogus"}, "gossip.preset must be one of lan, wan, local"),
        (
            {
                "DYNAQ_GOSSIP_PRESET": "bogus",
                "DYNAQ_GOSSIP_ENABLED": "true",
                "DYNAQ_GOSSIP_ALLOW_NODE_LOCAL_STORE": "true",
            },
            "gossip.preset must be one of lan, wan, local",
        ),
        (
            {
                "DYNAQ_GOSSIP_ENABLED": "true",
                "DYNAQ_GOSSIP_HOST": "0.0.0.0",
                "DYNAQ_GOSSIP_ALLOW_NODE_LOCAL_STORE": "true",
            },
            "gossip.key (a shared secret) is required",
        ),
        ({"DYNAQ_GOSSIP_ENABLED": "true"}, "a ring needs one shared store"),
        ({"DYNAQ_STATS_TYPE": "prometheus"}, "stats.type must be statsd or none"),
        ({"DYNAQ_AWS_KEYS": "nocolon"}, "aws.keys entries are KEY_ID:SECRET"),
        ({"DYNAQ_AWS_KEYS": "AKID:secret:nosuchtoken"}, "no auth token named 'nosuchtoken'"),
        ({"DYNAQ_DATA_DIR": ""}, "data.dir must name a directory"),
        (
            {"DYNAQ_HTTP_TLS_CERT": "/nonexistent.crt", "DYNAQ_HTTP_TLS_KEY": "/nonexistent.key"},
            "http.tls_cert / http.tls_key cannot be loaded",
        ),
        (
            {"DYNAQ_HTTP_WORKERS": "2", "DYNAQ_STORAGE_BACKEND": "memory"},
            "http.workers > 1 needs storage.backend = 'embedded'",
        ),
        (
            {"DYNAQ_OUTBOX_DSN": "postgresql://127.0.0.1:1/x", "DYNAQ_OUTBOX_TABLE": "no such;"},
            "outbox table 'no such;' must be NAME or SCHEMA.NAME",
        ),
    ],
)
def test_a_config_mistake_is_exit_2_before_anything_starts(
    tmp_path: Path, extra_env: dict[str, str], says: str
) -> None:
    out = _server(tmp_path, extra_env)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert out.stderr.startswith("dynaq: bad configuration: ") and says in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "d").exists()
    assert list((tmp_path / "cwd").iterdir()) == []  # no LOCK, no lmdb/ in the cwd


def test_a_missing_config_file_reads_alike_from_the_flag_and_the_variable(tmp_path: Path) -> None:
    flag = _server(tmp_path, {}, ["--config", "/nonexistent/dynaq.toml"])
    env = _server(tmp_path, {"DYNAQ_CONFIG": "/nonexistent/dynaq.toml"})
    assert flag.returncode == env.returncode == 2
    assert flag.stderr.replace("--config", "DYNAQ_CONFIG") == env.stderr


def _name_served(tmp_path: Path, extra_env: dict[str, str], args: list[str]) -> str:
    """The node name a ``dynaq server ARGS`` process answers ``/health`` with (the
    process is stopped after)."""
    p = node_process(tmp_path, "from-the-harness", env=extra_env)
    # The file is to name the node: the harness's DYNAQ_NODE_NAME would override it.
    del p.env["DYNAQ_NODE_NAME"]
    with open(p.log_path, "ab") as log:
        p.proc = subprocess.Popen(
            [sys.executable, "-m", "dynaq", "server", *args], env=p.env, stdout=log, stderr=log
        )
    try:
        p.wait_healthy(time.monotonic() + 30)
        with urllib.request.urlopen(p.url + "/health", timeout=5) as r:
            return str(json.loads(r.read())["node"])
    finally:
        assert p.terminate() == 0


def test_dynaq_config_names_the_config_file_and_the_flag_wins(tmp_path: Path) -> None:
    by_env = tmp_path / "by-env.toml"
    by_env.write_text('[node]\nname = "from-dynaq-config"\n')
    by_flag = tmp_path / "by-flag.toml"
    by_flag.write_text('[node]\nname = "from-the-flag"\n')
    assert _name_served(tmp_path, {"DYNAQ_CONFIG": str(by_env)}, []) == "from-dynaq-config"
    both = _name_served(tmp_path, {"DYNAQ_CONFIG": str(by_env)}, ["--config", str(by_flag)])
    assert both == "from-the-flag"
    # The flag wins before anything is read: a missing file DYNAQ_CONFIG names is not opened.
    missing = {"DYNAQ_CONFIG": "/nonexistent/dynaq.toml"}
    assert _name_served(tmp_path, missing, ["--config", str(by_flag)]) == "from-the-flag"
