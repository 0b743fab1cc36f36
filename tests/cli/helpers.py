"""Running ``dynaq`` as a process against a real node, for the CLI tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import EllipsisType
from typing import Any

from dynaq.testing.process import NodeProcess

ROOT = Path(__file__).resolve().parents[2]


def env_for(node: NodeProcess, token: str | None) -> dict[str, str]:
    """The environment a ``dynaq`` command gets: the node's endpoint, ``token``, no other
    ``DYNAQ_*`` from the caller's shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
    env["DYNAQ_ENDPOINT"] = node.url
    if token is not None:
        env["DYNAQ_TOKEN"] = token
    env["PYTHONPATH"] = str(ROOT)
    return env


class Run:
    """``dynaq ARGS`` as a process, with the node's endpoint and a token in the environment
    (``token``: the runner's unless given; ``None`` for none)."""

    def __init__(self, node: NodeProcess, token: str) -> None:
        self.node = node
        self.token = token

    def __call__(
        self,
        *args: str,
        token: str | EllipsisType | None = ...,
        stdin: str | None = None,
        code: int = 0,
    ) -> str:
        env = env_for(self.node, self.token if token is ... else token)
        done = subprocess.run(
            [sys.executable, "-m", "dynaq", *args],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == code, (args, done.returncode, done.stdout, done.stderr)
        self.stderr = done.stderr
        return done.stdout

    def exit_code(self, *args: str) -> int:
        """Run ``dynaq ARGS`` and return its exit code, whatever it is (stderr kept)."""
        done = subprocess.run(
            [sys.executable, "-m", "dynaq", *args],
            env=env_for(self.node, self.token),
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.stderr = done.stderr
        return done.returncode

    def json(self, *args: str, stdin: str | None = None) -> Any:
        return json.loads(self(*args, "--json", stdin=stdin))
