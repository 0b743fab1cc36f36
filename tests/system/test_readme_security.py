"""The README's "Security" examples run as written: the TOML parses, the shell sessions pass.

The shell blocks run in bash against a real ``dynaq server``; only the port
(``localhost:8081`` → a free one), the data directory and the interpreter
(``dynaq`` → ``python -m dynaq`` from this checkout) are swapped in.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from dynaq.config import config_from_mapping
from dynaq.core.access import AccessPolicy, parse_tokens
from dynaq.testing.process import ROOT, free_port

README = ROOT / "README.md"


def _blocks(lang: str) -> list[str]:
    text = README.read_text()
    section = text[text.index("## Security") : text.index("## Architecture")]
    return re.findall(rf"```{lang}\n(.*?)```", section, re.DOTALL)


def test_the_toml_example_is_a_valid_config() -> None:
    (block,) = _blocks("toml")
    config = config_from_mapping(tomllib.loads(block))
    tokens = parse_tokens(config.auth.tokens)
    assert [t.name for t in tokens] == ["ops", "ingest", "worker", "ci"]
    policy = AccessPolicy(tokens)
    ci = policy.find("ci-token-0123456789abcdef")  # configured by its digest
    assert ci is not None and ci.allows("read", "queue", "anything")
    worker = policy.find("0f1e2d3c4b5a69788796a5b4")
    assert worker is not None and worker.allows("write", "batch", "exact")
    assert config.http.tls_cert and config.http.tls_key and config.http.tls_ca


def _run(block: str, tmp_path: Path) -> str:
    if shutil.which("openssl") is None or shutil.which("curl") is None:
        pytest.skip("openssl and curl are needed to run the README's shell examples")
    port = free_port()
    script = block.replace("localhost:8081", f"localhost:{port}").replace(
        "dynaq server", f"{sys.executable} -m dynaq server"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
    env.update(
        {
            "DYNAQ_HTTP_PORT": str(port),
            "DYNAQ_DATA_DIR": str(tmp_path / "data"),
            "DYNAQ_STATS_TYPE": "none",
            "PYTHONPATH": str(ROOT),
        }
    )
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", f"cd {tmp_path} && {script}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_token_session_runs(tmp_path: Path) -> None:
    plain, _ = _blocks("sh")
    out = _run(plain, tmp_path)
    assert '"code":"unauthorized"' in out
    assert '"created"' in out
    assert '"body":"hi"' in out
    assert '"code":"forbidden"' in out


def test_the_https_session_runs(tmp_path: Path) -> None:
    _, tls = _blocks("sh")
    out = _run(tls, tmp_path)
    assert '"status":"serving"' in out
