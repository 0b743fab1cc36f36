"""Start N real dynaq node processes as one cluster on 127.0.0.1, for tests and benchmarks.

Shipped as code (like nats-server's ``run_cluster(size=3)``): every node gets
free HTTP and gossip ports, the same gossip secret and every other node as a
seed. :meth:`LocalCluster.start` launches all nodes at once, waits until each
answers ``/health`` and until every node lists every other one in
``/v1/status/servers``; :meth:`LocalCluster.stop` tears everything down.

Storage is either ``embedded`` (each node on its own LMDB: enough for
membership, slices and rejoin) or ``cassandra`` (one shared keyspace: what a
real cluster runs, needed for anything about messages across nodes).

HAProxy in front (:func:`start_haproxy`) runs the checkout's
``config/haproxy.cfg``; installed from a wheel, set ``DYNAQ_TESTING_HAPROXY_CFG``
to a copy of it. These calls block; from async code use
:func:`dynaq.testing.run_cluster`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from dynaq.testing.process import (
    ROOT,
    NodeProcess,
    free_port,
    launch_cwd,
    node_process,
    stop_process,
)

# The real `dynaq` command: nodes run exactly what users run.
LAUNCHER = ["-m", "dynaq"]
HAPROXY_CFG_ENV = "DYNAQ_TESTING_HAPROXY_CFG"


def http_get(url: str, timeout_s: float = 2.0, token: str | None = None) -> tuple[int, bytes]:
    """GET ``url`` (with ``token`` as a bearer token, if given); the status and body
    (an HTTP error status is returned, not raised)."""
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as r:
            return int(r.status), bytes(r.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), bytes(exc.read())


def first_plain_token(tokens: str) -> str | None:
    """The secret of the first ``NAME:TOKEN:GRANTS`` entry given in the clear (not as
    ``sha256:``), from the comma-separated ``DYNAQ_AUTH_TOKENS`` form."""
    for entry in tokens.split(","):
        _, _, rest = entry.strip().partition(":")
        secret, _, _ = rest.rpartition(":")
        if secret and not secret.startswith("sha256:"):
            return secret
    return None


@dataclass
class ClusterNode:
    """One node process of a :class:`LocalCluster`."""

    proc: NodeProcess
    gossip_port: int
    token: str | None = None
    """Bearer token for the status routes, when the nodes require one (``auth.tokens``)."""

    @property
    def name(self) -> str:
        """The node's name (``dynaq-1``, ...), as it appears in the ring."""
        return self.proc.name

    @property
    def url(self) -> str:
        """The node's HTTP base URL."""
        return self.proc.url

    @property
    def gossip_addr(self) -> str:
        """``127.0.0.1:<gossip port>``, as other nodes' seed lists spell it."""
        return f"127.0.0.1:{self.gossip_port}"

    def launch(self) -> None:
        """Start the process without waiting (see :meth:`wait_healthy`)."""
        self.proc.launch()

    def alive(self) -> bool:
        """Whether the process was launched and has not exited."""
        return self.proc.alive()

    def wait_healthy(self, deadline: float) -> None:
        """Block until ``/health`` answers 200 or the monotonic ``deadline`` passes."""
        self.proc.wait_healthy(deadline)

    def servers(self) -> list[str]:
        """Member names this node lists in ``/v1/status/servers``."""
        _, body = http_get(self.url + "/v1/status/servers", token=self.token)
        return sorted(line.split()[1] for line in body.decode().splitlines() if line.strip())

    def partition_range(self) -> tuple[int, int]:
        """``(bottom, top)`` ids of this node's slice, inclusive."""
        _, body = http_get(self.url + "/v1/status/partitionrange", token=self.token)
        data = json.loads(body)
        return int(data["bottom"]), int(data["top"])

    def kill(self) -> None:
        """SIGKILL: no leave, no drain (peers must detect the failure)."""
        self.proc.kill()

    def terminate(self, timeout_s: float = 20.0) -> int:
        """SIGTERM (graceful leave and drain) and wait for the exit code."""
        return self.proc.terminate(timeout_s)


@dataclass
class LocalCluster:
    """N dynaq nodes on 127.0.0.1 forming one ring."""

    tmp: Path
    size: int = 3
    backend: str = "embedded"
    cassandra_hosts: list[str] = field(default_factory=list)
    keyspace: str = "dynaq"
    riak_http: list[str] = field(default_factory=list)
    """With ``backend="riak"``: the Riak HTTP listeners; ``keyspace`` is the bucket prefix."""
    secret: str = "test-gossip-secret"
    preset: str = "local"
    sync_interval_s: float = 1.0
    env: dict[str, str] = field(default_factory=dict)
    nodes: list[ClusterNode] = field(default_factory=list)
    token: str | None = None
    """What the harness's own status reads send (any valid token will do); by default
    the first plain token of ``env["DYNAQ_AUTH_TOKENS"]``, if any."""

    def __post_init__(self) -> None:
        if self.token is None:
            self.token = first_plain_token(self.env.get("DYNAQ_AUTH_TOKENS", ""))
        ports = [free_port() for _ in range(self.size)]
        for i, port in enumerate(ports, start=1):
            self.nodes.append(self._describe(f"dynaq-{i}", port))
        self._reseed()

    def _describe(self, name: str, gossip_port: int, secret: str | None = None) -> ClusterNode:
        env = {
            "DYNAQ_GOSSIP_ENABLED": "true",
            "DYNAQ_GOSSIP_HOST": "127.0.0.1",
            "DYNAQ_GOSSIP_PORT": str(gossip_port),
            "DYNAQ_GOSSIP_KEY": self.secret if secret is None else secret,
            "DYNAQ_GOSSIP_PRESET": self.preset,
            "DYNAQ_SYNC_INTERVAL_S": str(self.sync_interval_s),
            "DYNAQ_STORAGE_BACKEND": self.backend,
            "DYNAQ_EMBEDDED_MAP_SIZE_MB": "1024",
            "DYNAQ_LOG_FORMAT": "text",
        }
        if self.backend == "cassandra":
            env["DYNAQ_CASSANDRA_HOSTS"] = ",".join(self.cassandra_hosts)
            env["DYNAQ_CASSANDRA_KEYSPACE"] = self.keyspace
        elif self.backend == "riak":
            env["DYNAQ_RIAK_HTTP"] = ",".join(self.riak_http)
            env["DYNAQ_RIAK_BUCKET_PREFIX"] = self.keyspace
        else:  # each node on its own LMDB: a membership-only ring (see the module docs)
            env["DYNAQ_GOSSIP_ALLOW_NODE_LOCAL_STORE"] = "true"
        env.update(self.env)
        return ClusterNode(node_process(self.tmp, name, env=env), gossip_port, self.token)

    def _reseed(self) -> None:
        seeds = ",".join(n.gossip_addr for n in self.nodes)
        for n in self.nodes:
            n.proc.env["DYNAQ_GOSSIP_SEEDS"] = seeds

    def add_node(self, name: str, *, secret: str | None = None) -> ClusterNode:
        """Describe one more node seeded with the whole ring (start it with :meth:`start_node`)."""
        node = self._describe(name, free_port(), secret)
        node.proc.env["DYNAQ_GOSSIP_SEEDS"] = ",".join(n.gossip_addr for n in self.nodes)
        self.nodes.append(node)
        return node

    def node(self, name: str) -> ClusterNode:
        """The node called ``name``."""
        return next(n for n in self.nodes if n.name == name)

    @property
    def urls(self) -> list[str]:
        """Base URLs of the nodes whose processes are running."""
        return [n.url for n in self.nodes if n.alive()]

    def start(self, timeout_s: float = 60.0) -> LocalCluster:
        """Launch every node at once; return when all are healthy and see each other."""
        if self.backend in ("cassandra", "riak"):
            self.migrate()
        for n in self.nodes:
            n.launch()
        deadline = time.monotonic() + timeout_s
        try:
            for n in self.nodes:
                n.wait_healthy(deadline)
            self.wait_converged([n.name for n in self.nodes], deadline - time.monotonic())
        except BaseException:
            self.stop()
            raise
        return self

    def migrate(self) -> None:
        """Create the shared store's schema once, before any node opens it."""
        first = self.nodes[0].proc
        subprocess.run(
            [sys.executable, *LAUNCHER, "migrate"],
            env=first.env,
            cwd=launch_cwd(),
            check=True,
            capture_output=True,
            timeout=120,
        )

    def start_node(self, node: ClusterNode, timeout_s: float = 30.0) -> None:
        """Launch one node (new or stopped) and wait until it is healthy."""
        node.launch()
        node.wait_healthy(time.monotonic() + timeout_s)

    def wait_converged(
        self, names: Iterable[str], timeout_s: float = 30.0, on: Iterable[ClusterNode] = ()
    ) -> float:
        """Wait until each node in ``on`` (default: every running node) lists exactly
        ``names``; return the seconds it took."""
        want = sorted(names)
        watchers = list(on) or [n for n in self.nodes if n.alive()]
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        seen: dict[str, list[str]] = {}
        while time.monotonic() < deadline:
            try:
                seen = {n.name: n.servers() for n in watchers}
            except (urllib.error.URLError, ConnectionError, TimeoutError, IndexError):
                seen = {}
            if seen and all(v == want for v in seen.values()):
                return time.monotonic() - t0
            time.sleep(0.05)
        logs = "\n".join(f"--- {n.name}\n{n.proc.log()[-2000:]}" for n in watchers)
        raise AssertionError(f"ring did not converge on {want}; saw {seen}\n{logs}")

    def stop(self) -> None:
        """SIGTERM every node (graceful leave), SIGKILL what does not exit in time."""
        for n in self.nodes:
            if n.alive():
                assert n.proc.proc is not None
                n.proc.proc.terminate()
        for n in self.nodes:
            if n.proc.proc is not None:
                try:
                    n.proc.proc.wait(20)
                except subprocess.TimeoutExpired:
                    n.proc.proc.kill()
                    n.proc.proc.wait(10)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# HAProxy ------------------------------------------------------------------------


def haproxy_config() -> Path:
    """The HAProxy config the harness runs: ``$DYNAQ_TESTING_HAPROXY_CFG`` when set,
    else the checkout's ``config/haproxy.cfg`` (installed from a wheel, set the
    variable to a copy of that file)."""
    override = os.environ.get(HAPROXY_CFG_ENV)
    return Path(override) if override else ROOT / "config" / "haproxy.cfg"


def haproxy_binary() -> str | None:
    """Debian's haproxy (installed by scripts/deps/haproxy.sh), or ``None``."""
    return shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")


def haproxy_unavailable() -> str | None:
    """``None`` if :func:`start_haproxy` can run here, else why not."""
    if haproxy_binary() is None:
        return "haproxy is not installed (scripts/deps/haproxy.sh)"
    config = haproxy_config()
    if not config.is_file():
        return f"no HAProxy config at {config} (set ${HAPROXY_CFG_ENV})"
    return None


@dataclass
class HaproxyProcess:
    """HAProxy running ``config/haproxy.cfg`` in front of up to 3 nodes."""

    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        """The balancer's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        """The last 5,000 characters of HAProxy's output."""
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        stop_process(self.proc)


def start_haproxy(tmp: Path, node_addrs: list[str], timeout_s: float = 20.0) -> HaproxyProcess:
    """Start HAProxy on a free port with the repository's config; wait until every
    node passes its health check (the stats socket is not needed: /health through
    the balancer must answer from every node)."""
    binary = haproxy_binary()
    if binary is None:
        raise RuntimeError("haproxy is not installed (scripts/deps/haproxy.sh)")
    config = haproxy_config()
    port = free_port()
    env = dict(os.environ)
    env.update(
        {
            "DYNAQ_LB_BIND": f"127.0.0.1:{port}",
            "DYNAQ_LB_STATS": f"127.0.0.1:{free_port()}",
        }
    )
    for i, addr in enumerate(node_addrs, start=1):
        env[f"DYNAQ_NODE_{i}"] = addr
    log_path = tmp / "haproxy.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [binary, "-db", "-f", str(config)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp,
        )
    lb = HaproxyProcess(port, proc, log_path)
    want = len(node_addrs)
    deadline = time.monotonic() + timeout_s
    seen: set[str] = set()
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"haproxy exited:\n{lb.log()}")
        try:
            status, body = http_get(lb.url + "/health", 1.0)
            if status == 200:
                seen.add(json.loads(body)["node"])
                if len(seen) >= want:
                    return lb
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    lb.stop()
    raise RuntimeError(f"haproxy did not reach {want} healthy nodes (saw {seen}):\n{lb.log()}")
