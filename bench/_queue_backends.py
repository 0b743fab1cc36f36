"""Queue throughput per storage backend, side by side in one run (``python -m bench queue --storage``).

``python -m bench queue --storage embedded,cassandra,riak [--quick] [--messages N] ...``
(``--storage riak`` alone runs the embedded store first, as the yardstick.)

For each backend in turn, one real dynaq node on that store (a throwaway
Cassandra 2.1 and a single-node Riak KV 3.2 started here, as the tests start
them) runs the two phases of the queue bench: batched enqueue (v2 msgpack
batches of 100, C connections) and receive+delete of what was stored. The
table gives msgs/s per backend and each one's ratio to the first backend
listed (the same-run yardstick). Riak runs with ``n_val = 1`` (one node), so
does Cassandra (replication factor 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench._queue_clients import BATCH, ClientPool, PhaseResult, Spec
from bench._queue_plan import Options, setup_queue, show, specs
from bench.common import progress, start_node

BACKENDS = ("embedded", "cassandra", "riak")


@contextlib.contextmanager
def _store_env(backend: str, tmp: Path) -> Iterator[dict[str, str]]:
    """The node environment for ``backend``, with its server running meanwhile."""
    if backend == "embedded":
        yield {"DYNAQ_STORAGE_BACKEND": "embedded"}
    elif backend == "cassandra":
        from dynaq.testing.servers.cassandra import start_cassandra

        server = start_cassandra(tmp / "cassandra")
        try:
            yield {"DYNAQ_STORAGE_BACKEND": "cassandra", "DYNAQ_CASSANDRA_HOSTS": server.host}
        finally:
            server.stop()
    elif backend == "riak":
        from dynaq.testing.servers.riak import start_riak

        riak = start_riak(tmp / "riak")
        try:
            yield {
                "DYNAQ_STORAGE_BACKEND": "riak",
                "DYNAQ_RIAK_HTTP": riak.http,
                "DYNAQ_RIAK_PB": riak.pb,
                "DYNAQ_RIAK_N_VAL": "1",
            }
        finally:
            riak.stop()
    else:
        raise SystemExit(f"unknown backend {backend!r}; use {', '.join(BACKENDS)}")


def run(o: Options, backends: list[str]) -> dict[str, Any]:
    """Each backend in turn; a lone backend gets the embedded store as its yardstick."""
    if backends != ["embedded"] and "embedded" not in backends and len(backends) == 1:
        backends = ["embedded", *backends]

    tmp = Path(tempfile.mkdtemp(prefix="dynaq-bench-backends-"))
    pool = ClientPool(o.procs)
    rows: dict[str, dict[str, PhaseResult]] = {}
    try:
        for backend in backends:
            (tmp / backend).mkdir(parents=True)
            with _store_env(backend, tmp / backend) as env:
                node = start_node(tmp / backend, name=f"bench-{backend}", **env, **o.node_env)
                try:
                    assert node.proc is not None
                    asyncio.run(setup_queue(node.url))
                    pid, c = node.proc.pid, o.concurrency
                    batch = pool.run(specs("dq_batch", node.url, o, pool, o.messages, c), pid)
                    show(f"{backend}: enqueue, batches of {BATCH}", batch)
                    plan = specs("dq_consume", node.url, o, pool, batch.count, c)
                    consume = pool.run(plan, pid)
                    show(f"{backend}: receive+delete", consume)
                    rows[backend] = {"enqueue": batch, "consume": consume}
                finally:
                    node.terminate()
    finally:
        pool.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return _summary(o, backends, rows)


def _summary(
    o: Options, backends: list[str], rows: dict[str, dict[str, PhaseResult]]
) -> dict[str, Any]:
    base = backends[0]
    progress(f"{'backend':<10} {'enqueue msgs/s':>15} {'recv+delete msgs/s':>19}  ratio to {base}")
    out: dict[str, Any] = {"scenario": "queue-backends", "quick": o.quick, "yardstick": base}
    for b in backends:
        enq, con = rows[b]["enqueue"], rows[b]["consume"]
        r_enq = enq.msgs_per_s / max(rows[base]["enqueue"].msgs_per_s, 1e-9)
        r_con = con.msgs_per_s / max(rows[base]["consume"].msgs_per_s, 1e-9)
        progress(
            f"{b:<10} {enq.msgs_per_s:>15.0f} {con.msgs_per_s:>19.0f}  {r_enq:.3f} / {r_con:.3f}"
        )
        out[b] = {
            "enqueue_msgs_per_s": round(enq.msgs_per_s),
            "receive_delete_msgs_per_s": round(con.msgs_per_s),
            "enqueue_count": enq.count,
            "consumed": con.count,
            "errors": enq.errors + con.errors,
            "enqueue_ratio": round(r_enq, 3),
            "receive_delete_ratio": round(r_con, 3),
        }
    return out


__all__ = ["BACKENDS", "Spec", "run"]
