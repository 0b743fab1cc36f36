"""Run a real single-node Riak KV 3.2.2 (OpenRiak, leveled backend) on free 127.0.0.1 ports.

``scripts/deps/riak.sh`` builds the release once from the offline source bundle
(``../shared/riak``) into ``<cache>/riak`` and copies the bundle's ``start.sh``
and ``stop.sh`` beside it; :func:`start_riak` runs ``start.sh`` in a fresh
folder with HTTP and protocol-buffers ports picked free by this process, and
returns once KV really serves (``start.sh`` waits for ``/ping``, ``riak admin
wait-for-service riak_kv`` and a probe PUT/GET/DELETE; about 20 s).
:meth:`RiakServer.stop` runs ``stop.sh``, which stops the node and *its own*
epmd (every node gets an epmd on its own port, so nothing is left behind and
the system epmd on 4369 is never touched), killing stragglers by PID.

Where Riak is: ``<checkout>/.cache/riak`` (``release`` names the built release,
``scripts/`` holds start/stop), or ``$DYNAQ_TESTING_CACHE_DIR/riak``. Blocking;
from async code use :func:`asyncio.to_thread`.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from dynaq.testing.process import CACHE_DIR_ENV, cache_dir, free_port

START_TIMEOUT_S = 180


@dataclass
class RiakServer:
    """A running single-node Riak on 127.0.0.1."""

    http_port: int
    pb_port: int
    directory: Path
    node: str
    pids: tuple[int, ...]

    @property
    def http(self) -> str:
        """``host:port`` of the HTTP listener, as ``[riak] http`` spells it."""
        return f"127.0.0.1:{self.http_port}"

    @property
    def pb(self) -> str:
        """``host:port`` of the protocol-buffers listener."""
        return f"127.0.0.1:{self.pb_port}"

    def admin(self, *args: str, timeout_s: float = 120.0) -> str:
        """Run ``riak admin ARGS`` against this node; return its output."""
        out = subprocess.run(
            [str(self.directory / "bin" / "riak"), "admin", *args],
            cwd=self.directory,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"riak admin {' '.join(args)}: {out.stdout}{out.stderr}"[-2000:])
        return out.stdout

    def stop(self) -> None:
        """``stop.sh``: the node and its epmd end, by PID; the data stays in :attr:`directory`."""
        subprocess.run(
            [str(_scripts() / "stop.sh"), str(self.directory)],
            capture_output=True,
            timeout=120,
            check=False,
        )

    def kill(self) -> None:
        """SIGKILL the node's beam at once (a crash); :meth:`stop` still cleans up."""
        if self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pids[0], signal.SIGKILL)


def _home() -> Path:
    return cache_dir() / "riak"


def _scripts() -> Path:
    return _home() / "scripts"


def release() -> Path | None:
    """The built release that ``scripts/deps/riak.sh`` recorded, if it is there."""
    marker = _home() / "release"
    if not marker.is_file():
        return None
    rel = Path(marker.read_text().strip())
    return rel if (rel / "bin" / "riak").exists() else None


def available() -> str | None:
    """``None`` if Riak can run here, else why not."""
    if release() is None or not (_scripts() / "start.sh").exists():
        return (
            f"Riak is not built ({_home()}); run scripts/deps/riak.sh (needs the source "
            f"bundle in ../shared/riak or RIAK_SRC_DIR) or set {CACHE_DIR_ENV}"
        )
    return None


def start_riak(
    directory: Path, *, extra_conf: dict[str, str] | None = None, tries: int = 2
) -> RiakServer:
    """Start a node in the empty ``directory``; block until KV serves (see module docs).

    A start that fails is cleaned up by ``start.sh`` and tried again in a fresh
    sub-folder (on a loaded two-core box, start.sh has been seen to give up once).
    """
    for attempt in range(1, tries + 1):
        folder = directory / f"try{attempt}"
        try:
            return _start(folder, extra_conf)
        except RuntimeError:
            # start.sh may give up on a node that then comes up anyway (seen in a
            # suite run: a beam left serving for the rest of the session): stop it.
            if (folder / "riak-node.env").exists():
                subprocess.run(
                    [str(_scripts() / "stop.sh"), str(folder)],
                    capture_output=True,
                    timeout=120,
                    check=False,
                )
            if attempt == tries:
                raise
    raise AssertionError("unreachable")


def _start(directory: Path, extra_conf: dict[str, str] | None) -> RiakServer:
    rel = release()
    if rel is None:
        raise RuntimeError(available() or "Riak is not built")
    directory.mkdir(parents=True, exist_ok=True)
    if extra_conf:
        lines = [f"{k} = {v}" for k, v in extra_conf.items()]
        (directory / "riak.conf.extra").write_text("\n".join(lines) + "\n")
    http_port, pb_port = free_port(), free_port()
    env = {**os.environ, "RIAK_RELEASE": str(rel), "RIAK_START_TIMEOUT": str(START_TIMEOUT_S)}
    out = subprocess.run(
        [str(_scripts() / "start.sh"), str(directory), str(http_port), str(pb_port)],
        capture_output=True,
        text=True,
        env=env,
        timeout=START_TIMEOUT_S + 60,
        check=False,
    )
    if out.returncode != 0:
        log = directory / "log" / "console.log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise RuntimeError(
            f"Riak did not start (exit {out.returncode}): {out.stderr[-3000:]}{tail}"
        )
    values: dict[str, str] = {}
    for line in out.stdout.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.startswith("RIAK_"):
            values[name] = " ".join(shlex.split(value))
    return RiakServer(
        http_port=int(values["RIAK_HTTP_PORT"]),
        pb_port=int(values["RIAK_PB_PORT"]),
        directory=directory,
        node=values["RIAK_NODE"],
        pids=tuple(int(p) for p in values.get("RIAK_PIDS", "").split()),
    )
