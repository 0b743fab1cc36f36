"""The ring across real node processes: convergence, slices, failure, rejoin, admission.

Each node runs on its own embedded store here: membership, slices and the
status routes need nothing shared. (Messages across nodes need the shared
Cassandra store: see ``test_cluster_cassandra.py``.)
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynaq.testing.cluster import ClusterNode, LocalCluster

TOP = (1 << 63) - 1


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, 3) as c:
        yield c


def assert_tiles(nodes: list[ClusterNode]) -> None:
    """The nodes' partition ranges cover [0, 2^63) with no gap and no overlap."""
    ranges = sorted(n.partition_range() for n in nodes)
    assert ranges[0][0] == 0
    for (_, top), (bottom, _) in itertools.pairwise(ranges):
        assert bottom == top + 1
    assert ranges[-1][1] == TOP


def test_three_nodes_converge_and_slices_tile(cluster: LocalCluster) -> None:
    names = ["dynaq-1", "dynaq-2", "dynaq-3"]
    for n in cluster.nodes:
        assert n.servers() == names
    assert_tiles(cluster.nodes)
    # slices follow sorted names (Dynamiq's rule): dynaq-1 starts at 0
    assert cluster.node("dynaq-1").partition_range()[0] == 0


def test_killed_node_is_dropped_and_rejoins_with_a_slice(cluster: LocalCluster) -> None:
    victim = cluster.node("dynaq-2")
    before = victim.partition_range()
    survivors = [n for n in cluster.nodes if n is not victim]
    victim.kill()
    detect_s = cluster.wait_converged(["dynaq-1", "dynaq-3"], 30, on=survivors)
    assert_tiles(survivors)
    t0 = time.monotonic()
    cluster.start_node(victim)
    cluster.wait_converged(["dynaq-1", "dynaq-2", "dynaq-3"], 30)
    rejoin_s = time.monotonic() - t0
    assert victim.partition_range() == before
    assert_tiles(cluster.nodes)
    print(f"\nfailure detection {detect_s:.2f} s, restart to rejoined {rejoin_s:.2f} s")


def test_graceful_stop_leaves_at_once(cluster: LocalCluster) -> None:
    leaver = cluster.node("dynaq-3")
    survivors = [n for n in cluster.nodes if n is not leaver]
    t0 = time.monotonic()
    assert leaver.terminate() == 0
    cluster.wait_converged(["dynaq-1", "dynaq-2"], 5, on=survivors)
    print(f"\ngraceful leave seen {time.monotonic() - t0:.2f} s after SIGTERM")
    assert_tiles(survivors)


def test_wrong_gossip_secret_is_not_admitted(cluster: LocalCluster) -> None:
    intruder = cluster.add_node("dynaq-0", secret="not-the-secret")
    cluster.start_node(intruder)
    time.sleep(2.0)  # many probe rounds on the local preset
    members = ["dynaq-1", "dynaq-2", "dynaq-3"]
    cluster.wait_converged(members, 5, on=[n for n in cluster.nodes if n is not intruder])
    assert intruder.servers() == ["dynaq-0"]
    # a node with the right secret joined by the same path is admitted
    friend = cluster.add_node("dynaq-4")
    cluster.start_node(friend)
    cluster.wait_converged(
        [*members, "dynaq-4"], 15, on=[n for n in cluster.nodes if n is not intruder]
    )
