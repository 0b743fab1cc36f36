"""Smoke tests of the workers' benchmarks: ``bench queue --workers 2`` and ``bench lmdb_procs``."""

from __future__ import annotations

import json

from tests.system.test_bench_smoke import _need_peer, _run


def test_queue_quick_with_two_workers_reports_the_scaling_against_one() -> None:
    _need_peer()
    done = _run("queue", "--quick", "--workers", "2", "--no-peer")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["workers"] == 2
    assert result["layout"] == "shared"
    assert result["errors"] == 0
    for what in ("enqueue_batch", "receive_delete", "enqueue_single"):
        assert result[f"w1_{what}_msgs_per_s"] > 0, what
        assert result[f"scaling_{what}"] > 0, what
    assert result["w1_rtt_p50_ms"] > 0
    for phase in ("dq_batch", "w1_batch", "dq_single", "w1_single"):
        assert result[f"client_cores_{phase}"] >= 0
        # The 2-worker node's CPU counts its workers (the supervisor alone idles).
        assert result[f"server_cores_{phase}"] > 0
    counts = result["counts"]
    # Each node consumed exactly what its own batch phase stored.
    assert counts["w1_consume"] == counts["w1_batch"] > 0
    assert counts["dq_consume"] == counts["dq_batch"] > 0
    assert "dynaq 2 workers enqueue" in done.stderr
    assert "dynaq 1 worker enqueue" in done.stderr


def test_lmdb_procs_reports_the_three_layouts() -> None:
    done = _run("lmdb_procs", "--seconds", "0.5", "--rounds", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for layout in ("one", "shared", "own"):
        assert result[f"{layout}_puts_per_s"] > 0, layout
        assert result[f"{layout}_commit_p50_ms"] > 0, layout
    assert result["ratio_shared_vs_one"] > 0
    assert result["ratio_own_vs_one"] > 0


def test_queue_quick_with_own_environments_reports_its_layout() -> None:
    _need_peer()
    done = _run("queue", "--quick", "--workers", "2", "--layout", "own", "--no-peer")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["layout"] == "own"
    # Enqueues land in whichever process's environment: none fails.
    assert result["enqueue_batch_msgs_per_s"] > 0
    assert result["scaling_enqueue_batch"] > 0
    assert result["counts"]["dq_batch"] == result["counts"]["w1_batch"] > 0
