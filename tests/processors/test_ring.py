"""Processors on a ring: a real worker talks to one node of a 3-node Cassandra ring
that is not the authority of the streams it uses, so every request of the
exactly-once algorithm (conditional appends, the backing stream's publisher lease,
the hidden-stream listing, reads) is forwarded; then the authority of the output
and backing streams is killed -9 under load, the streams fail over to their most
complete copies under a new epoch, and the checker still sees every input exactly
once. The ring runs with ``streams.acks = quorum``, which the guarantee needs (see
"In a ring" in :mod:`dynaq.processors.exactly_once`).

One ring for the module; the failover test kills a node, so it runs last.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynaq.client import Client, DynaqError
from dynaq.processors import records
from dynaq.processors.runner import BACKING_MAX_BYTES
from dynaq.testing.cluster import ClusterNode, LocalCluster, http_get
from dynaq.testing.servers.cassandra import CassandraServer
from tests.fixtures.cassandra import new_keyspace
from tests.processors import checker
from tests.processors.checker import deliveries
from tests.processors.harness import Harness, wait_for

APP = "transform"


@pytest.fixture(scope="module")
def ring(
    tmp_path_factory: pytest.TempPathFactory, cassandra: CassandraServer
) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        tmp_path_factory.mktemp("processors-ring"),
        3,
        backend="cassandra",
        cassandra_hosts=[cassandra.host],
        keyspace=new_keyspace(),
        env={"DYNAQ_STREAMS_ACKS": "quorum"},
    )
    with cluster:
        yield cluster


def _authorities(node: ClusterNode) -> dict[str, str]:
    """Every stream (hidden ones too) and the node serving it, as ``node`` lists them."""
    status, body = http_get(node.url + "/v2/streams?hidden=true", timeout_s=10.0)
    assert status == 200, body
    listed = json.loads(body)["streams"]
    # The copies' sizes the worker's quorum checks read (io.durable, StreamInput).
    assert all(isinstance(e.get("copies"), dict) for e in listed), listed
    return {e["name"]: e["node"] for e in listed}


def _streams(t: str) -> dict[str, str]:
    return {"in": f"{t}-in", "out": f"{t}-out", "err": f"{t}-err", "backing": f"_cues.{t}-g.double"}


def _declare(c: Client, t: str) -> None:
    s = _streams(t)
    for k in ("in", "out", "err"):
        c.declare_stream(s[k], {"type": "object"})
    c.declare_stream(
        s["backing"], records.BACKING_SCHEMA, retention={"max_bytes": BACKING_MAX_BYTES}
    )


def _pick(cluster: LocalCluster, base: str, fits: object) -> tuple[str, dict[str, str]]:
    """The first test prefix ``base-k`` whose streams' authorities satisfy ``fits``
    (declared through the first node; the names hash to the nodes' slices)."""
    first = cluster.nodes[0]
    with Client(first.url) as c:
        for k in range(40):
            t = f"{base}{k}"
            _declare(c, t)
            owners = _authorities(first)
            auth = {key: owners[name] for key, name in _streams(t).items()}
            if fits(auth):  # type: ignore[operator]
                return t, auth
    raise AssertionError(f"no prefix {base}<k> fits")


class Feeder:
    """Appends inputs (and foreign entries to the output, so recorded indexes are often
    taken by someone else) through one node, from a thread, riding out 503s."""

    def __init__(self, url: str, t: str) -> None:
        self.url, self.t = url, t
        self.sent: list[int] = []
        self.answers: dict[str, int] = {}
        self.counter = itertools.count(1)
        self.stop = threading.Event()

    def batch(self, c: Client, size: int) -> None:
        """Inputs (retried as they are: the tests never kill the input stream's
        authority, so an input append has no unknown outcome), then a foreign entry."""
        ns = [next(self.counter) for _ in range(size)]
        while True:
            try:
                c.append(f"{self.t}-in", [{"n": n} for n in ns])
            except DynaqError as exc:
                self.answers[exc.code] = self.answers.get(exc.code, 0) + 1
                time.sleep(0.1)
                continue
            self.sent.extend(ns)
            break
        try:
            c.append(f"{self.t}-out", [{"foreign": True}])
        except DynaqError as exc:
            self.answers[exc.code] = self.answers.get(exc.code, 0) + 1

    def run(self) -> None:
        with Client(self.url) as c:
            while not self.stop.is_set():
                self.batch(c, 3)
                time.sleep(0.05)


def _delivered(c: Client, t: str) -> set[int]:
    """The distinct inputs delivered so far (none while a stream fails over)."""
    try:
        got = _delivered_now(c, t)
    except DynaqError as exc:
        assert exc.retriable, exc
        return set()
    return got


def _delivered_now(c: Client, t: str) -> set[int]:
    got = {int(e["n"]) for e in deliveries(c, f"{t}-out")}
    return got | {int(e["inputs"][f"{t}-in"]["n"]) for e in deliveries(c, f"{t}-err")}


def test_a_worker_on_a_node_serving_none_of_its_streams_delivers_exactly_once(
    ring: LocalCluster, tmp_path: Path
) -> None:
    """Every request the worker makes is forwarded: the backing stream's lease and its
    appends, conditional output appends (some taken by a foreign writer), the
    hidden-stream listing, the reads of recovery. Two workers in turn (the second
    recovers from the first's backing stream, through forwarding too)."""
    t, auth = _pick(ring, "fwd", lambda a: len(set(a.values())) < 3)
    via = next(n for n in ring.nodes if n.name not in set(auth.values()))
    h = Harness(via, APP, t, tmp_path)
    feeder = Feeder(via.url, t)
    with Client(via.url) as c:
        assert f"_cues.{t}-g.double" in {s.name for s in c.list_streams(hidden=True)}
        for _ in range(5):
            feeder.batch(c, 6)
        w = h.start()
        wait_for(lambda: _delivered(c, t) >= set(feeder.sent), 60, "the first deliveries")
        assert w.terminate() == 0, w.log()
        for _ in range(5):
            feeder.batch(c, 6)
        w = h.start()
        wait_for(lambda: _delivered(c, t) >= set(feeder.sent), 60, "the second deliveries")
        assert w.terminate() == 0, w.log()
        summary = checker.check_transform(c, t, feeder.sent)
        backing = c.stream_size(f"_cues.{t}-g.double")
    # Nothing moved: the worker's node served none of the streams all along.
    assert {k: _authorities(via)[v] for k, v in _streams(t).items()} == auth
    assert backing > 0 and summary["outputs"] + summary["errors"] == len(feeder.sent)
    print(f"\nRING-FORWARDED {json.dumps({'via': via.name, 'authorities': auth, **summary})}")


def test_kill_9_of_the_output_and_backing_authority_then_exactly_once(
    ring: LocalCluster, tmp_path: Path
) -> None:
    """The output and backing streams share an authority, killed -9 while the worker
    (on another node) delivers and inputs keep coming: both streams fail over under a
    new epoch, the worker's appends in flight get unknown outcomes (503s, fenced lease
    tokens: the new epoch's tokens start higher), it interrupts and recovers, and every
    input lands exactly once."""
    t, auth = _pick(ring, "kill", lambda a: a["out"] == a["backing"] and a["in"] != a["out"])
    victim = ring.node(auth["out"])
    via = next(n for n in ring.nodes if n.name not in (victim.name, auth["in"]))
    h = Harness(via, APP, t, tmp_path)
    feeder = Feeder(via.url, t)
    feeding = threading.Thread(target=feeder.run, daemon=True)
    with Client(via.url) as c:
        w = h.start()
        feeding.start()
        try:
            wait_for(lambda: len(_delivered(c, t)) >= 40, 60, "deliveries before the kill")
            before = len(_delivered(c, t))
            victim.kill()
            killed_at = time.monotonic()
            wait_for(lambda: len(_delivered(c, t)) >= before + 30, 60, "deliveries after failover")
            resumed_s = time.monotonic() - killed_at
        finally:
            feeder.stop.set()
            feeding.join(30)
        wait_for(lambda: _delivered(c, t) >= set(feeder.sent), 60, "the last deliveries")
        assert w.terminate() == 0, w.log()
        summary = checker.check_transform(c, t, feeder.sent)
    now = _authorities(via)
    assert now[f"{t}-out"] != victim.name and now[f"_cues.{t}-g.double"] != victim.name
    log = w.log_path.read_text(errors="replace")
    interruptions = log.count('"processor interrupted"') + log.count('"processor lost its lease"')
    assert interruptions > 0, "the kill never reached the worker"
    figures = {
        "via": via.name,
        "killed": victim.name,
        "sent": len(feeder.sent),
        **summary,
        "worker_interruptions": interruptions,
        "feeder_errors": feeder.answers,
        "resumed_after_s": round(resumed_s, 2),
    }
    print(f"\nRING-FAILOVER {json.dumps(figures)}")
