"""A node of several worker processes: each worker's role and the config it runs with.

``http.workers = N`` (N > 1) makes ``dynaq server`` a supervisor
(:mod:`dynaq.node.supervisor`) that starts N worker processes. Together they
serve the node's slice, and to clients they are one node:

* **One port.** Every worker binds the public ``http.host:http.port`` with
  ``SO_REUSEPORT``; the kernel spreads connections over the workers.
* **One store.** Every worker opens the same LMDB environment under
  ``data.dir``. With ``embedded.writer = "process"`` the supervisor runs one
  writer process for all of them (:mod:`dynaq.storage.embedded_writer_host`):
  the workers send it their writes, and one group commit holds the writes of
  every worker. With ``embedded.writer = "thread"`` each worker keeps its own
  writer thread, and LMDB's lock file makes their commits take the write lock
  in turn.
* **A ring on loopback.** Each worker is a ring member named
  ``<node.name>-w<i>``, gossiping on its own 127.0.0.1 port, with a private
  HTTP listener on 127.0.0.1 for the node-to-node routes (hints, ring polls,
  the in-flight handover). The ring splits the lanes among the workers exactly
  as it splits them among machines, so everything the ring guarantees under
  faults holds here: a write through any worker lands in the shared store and
  hints the lane's owner; a receive (and a long poll) reaching a worker whose
  lanes hold nothing asks the others (:mod:`dynaq.services.queues.ring_poll`);
  a receipt names the worker that served it and is answered there. Because the
  store is shared, a worker that dies strands nothing: the survivors take its
  lanes and find its messages in the store.
* **Ids.** Each worker leases its own writer slot (:mod:`dynaq.cluster.slots`),
  so ids stay unique; each stamps store versions with its own tag
  (:class:`~dynaq.storage.embedded.LmdbStore` ``version_tag``), so a
  conditional put never mistakes another worker's write for the version it read.

The role of a worker (its index, the loopback ports of all workers and the
ring's secret) is chosen once by the supervisor and handed to the worker in the
``DYNAQ_WORKER_ROLE`` environment variable, so a restarted worker rejoins under
the same name and addresses.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from dynaq.api.keys import WorkerOf
from dynaq.api.worker_metrics import WorkerScrape
from dynaq.clock import Clock
from dynaq.config import Config
from dynaq.core.membership import MembershipView
from dynaq.core.peer_auth import PeerSigner
from dynaq.errors import InvalidInput
from dynaq.services.queues.dedup_lock import DedupFileLock

log = logging.getLogger(__name__)

ROLE_ENV = "DYNAQ_WORKER_ROLE"
MAX_WORKERS = 16
"""At most this many workers: each leases one of the 32 writer slots of a store."""


@dataclass(frozen=True)
class WorkerRole:
    """What one worker process of a node is: set by the supervisor, never by users."""

    index: int
    gossip_ports: tuple[int, ...]
    """Each worker's gossip port on 127.0.0.1 (index ``i`` is worker ``i``'s)."""
    peer_ports: tuple[int, ...]
    """Each worker's private HTTP port on 127.0.0.1 (node-to-node routes)."""
    public_port: int
    """The node's HTTP port, shared by every worker (``SO_REUSEPORT``)."""
    key: str
    """The secret of the workers' ring (signs gossip, hints and handovers)."""
    parent: int = 0
    """The supervisor's process id (a worker started after it died exits at once)."""
    writer_address: str = ""
    """Where the node's shared store writer process listens (``embedded.writer =
    "process"``); empty: each worker commits with its own writer thread."""

    @property
    def count(self) -> int:
        return len(self.gossip_ports)

    def encode(self) -> str:
        return json.dumps(
            {
                "index": self.index,
                "gossip_ports": list(self.gossip_ports),
                "peer_ports": list(self.peer_ports),
                "public_port": self.public_port,
                "key": self.key,
                "parent": self.parent,
                "writer_address": self.writer_address,
            }
        )

    @classmethod
    def decode(cls, text: str) -> WorkerRole:
        try:
            raw = json.loads(text)
            return cls(
                index=int(raw["index"]),
                gossip_ports=tuple(int(p) for p in raw["gossip_ports"]),
                peer_ports=tuple(int(p) for p in raw["peer_ports"]),
                public_port=int(raw["public_port"]),
                key=str(raw["key"]),
                parent=int(raw.get("parent", 0)),
                writer_address=str(raw.get("writer_address", "")),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidInput(f"{ROLE_ENV} is malformed: {exc}") from exc


def role_from_env(env: dict[str, str] | None = None) -> WorkerRole | None:
    """This process's worker role, when a supervisor started it (else ``None``)."""
    text = (os.environ if env is None else env).get(ROLE_ENV)
    return None if not text else WorkerRole.decode(text)


def worker_count(config: Config, cores: int | None = None) -> int:
    """How many workers ``http.workers`` asks for. ``0``: one per core, at most
    :data:`MAX_WORKERS`, where several can serve (:func:`several_possible`), else
    one, so ``0`` never refuses a config that one process can run."""
    n = config.http.workers
    if n == 0:
        if not several_possible(config):
            return 1
        n = cores if cores is not None else usable_cores()
    return max(1, min(n, MAX_WORKERS))


def several_possible(config: Config) -> bool:
    """Whether several workers can serve this node: the embedded store (they share
    its LMDB environment) and no ring of machines (they form their own)."""
    return config.storage.backend == "embedded" and not (
        config.gossip.enabled or config.gossip.seeds
    )


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: a node pinned with
    ``taskset`` or a container's cpuset counts those, not the machine's)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_workers(config: Config) -> None:
    """Refuse what several workers cannot do (yet): only the embedded store, and no
    ring of machines (the workers form their own ring on loopback)."""
    if worker_count(config) == 1:
        return
    if config.storage.backend != "embedded":
        raise InvalidInput(
            "http.workers > 1 needs storage.backend = 'embedded' (the workers share its "
            f"LMDB environment), not {config.storage.backend!r}"
        )
    if config.gossip.enabled or config.gossip.seeds:
        raise InvalidInput(
            "http.workers > 1 cannot join a ring of machines yet (the workers form their "
            "own ring on 127.0.0.1): set http.workers = 1 or turn gossip off"
        )


def worker_config(config: Config, role: WorkerRole) -> Config:
    """The config worker ``role.index`` of the node ``config`` describes runs with."""
    me = role.index
    gossip = dataclasses.replace(
        config.gossip,
        enabled=True,
        host="127.0.0.1",
        port=role.gossip_ports[me],
        seeds=[f"127.0.0.1:{p}" for i, p in enumerate(role.gossip_ports) if i != me],
        key=role.key,
        label=f"{config.gossip.label}-{config.node.name}",
        # Loopback: the short failure-detection timings suit it.
        preset="local",
        advertise=f"127.0.0.1:{role.gossip_ports[me]}",
        advertise_http=f"127.0.0.1:{role.peer_ports[me]}",
        # The workers share one store: the ring strands nothing.
        allow_node_local_store=True,
    )
    http = dataclasses.replace(config.http, port=role.public_port, workers=1)
    node = dataclasses.replace(config.node, name=worker_name(config.node.name, me))
    return dataclasses.replace(config, gossip=gossip, http=http, node=node)


def worker_name(node: str, index: int) -> str:
    """The ring member name of worker ``index`` of ``node``."""
    return f"{node}-w{index}"


def worker_scrape(
    role: WorkerRole | None, view: MembershipView, signer: PeerSigner | None
) -> WorkerScrape | None:
    """A worker of several: its scrape of the others, so that ``/metrics`` on the
    node's port shows every worker whichever one answers (None for one worker)."""
    if role is None or len(role.peer_ports) < 2 or signer is None:
        return None
    node = view.me.name.removesuffix(f"-w{role.index}")
    names = [worker_name(node, i) for i in range(len(role.peer_ports))]
    return WorkerScrape(signer, view, names)


def worker_of(config: Config, role: WorkerRole | None, http: str) -> WorkerOf | None:
    """A worker of several: the node it answers as, from the node's ``config`` (its
    name, how many workers) and ``http``, the address clients reach it at; else None."""
    if role is None or role.count < 2:
        return None
    return WorkerOf(config.node.name, role.count, http)


def worker_dedup_lock(config: Config, role: WorkerRole | None) -> DedupFileLock | None:
    """A worker of several: the lock its node's workers share for dedup checks, so
    two of them never both store a copy of one dedup id (None for one worker)."""
    if role is None:
        return None
    return DedupFileLock(Path(config.data.dir) / "dedup.lock")


OTHERS_SERVING_TIMEOUT_S = 10.0
"""How long a starting worker waits for the others to serve before it takes
clients anyway (a worker that never comes up must not keep the node shut)."""


async def wait_for_other_workers(
    role: WorkerRole, clock: Clock, timeout_s: float = OTHERS_SERVING_TIMEOUT_S
) -> list[str]:
    """Wait until every other worker of the node answers ``GET /health`` 200 on its
    own loopback address, at most ``timeout_s``; the names of those that did not.

    Why: a worker that has joined the ring of workers serves its lanes, and asks the
    others for theirs. A worker still joining answers those asks 503, so until it
    serves, the messages in its lanes are visible to no client. A worker takes the
    node's port only after this, so at start the node answers its first client with
    every worker serving. A worker restarted alone finds the others serving at once.
    """
    waiting = {
        f"w{i}": f"http://127.0.0.1:{port}/health"
        for i, port in enumerate(role.peer_ports)
        if i != role.index
    }
    deadline = clock.monotonic() + timeout_s
    timeout = aiohttp.ClientTimeout(total=1.0)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        while waiting and clock.monotonic() < deadline:
            for name, url in list(waiting.items()):
                try:
                    async with http.get(url) as r:
                        if r.status == 200:
                            del waiting[name]
                except (TimeoutError, aiohttp.ClientError):
                    pass  # not listening yet (still starting), or restarting
            if waiting:
                await clock.sleep(0.02)
    if waiting:
        log.warning(
            "taking clients before every worker serves",
            extra={"workers": sorted(waiting), "waited_s": timeout_s},
        )
    return sorted(waiting)
