"""Smoke test of the benchmark harness: ``python -m bench queue --quick`` end to end.

Runs a real dynaq node and a real ``nats-server -js`` with tiny counts and
checks the final stdout line is the JSON object of named, positive figures.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _need_peer() -> None:
    missing = []
    if shutil.which("nats-server") is None and not Path("/usr/sbin/nats-server").exists():
        missing.append("nats-server (scripts/deps/nats.sh)")
    if importlib.util.find_spec("nats") is None:
        missing.append("nats-py (the bench extra)")
    if missing:
        reason = "needed for the queue benchmark: " + ", ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_bench_lists_scenarios() -> None:
    done = _run()
    assert done.returncode == 0, done.stderr
    assert "queue" in done.stdout


def test_bench_unknown_scenario_fails() -> None:
    done = _run("no-such-scenario")
    assert done.returncode == 2
    assert "unknown scenario" in done.stderr


def test_queue_quick_reports_named_positive_figures() -> None:
    _need_peer()
    done = _run("queue", "--quick")
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    result = json.loads(last)
    assert result["scenario"] == "queue"
    assert result["peer"] == "nats-jetstream"
    assert result["errors"] == 0
    for name in (
        "enqueue_batch_msgs_per_s",
        "receive_delete_msgs_per_s",
        "enqueue_single_msgs_per_s",
        "rtt_p50_ms",
        "rtt_p99_ms",
        "peer_publish_batch_msgs_per_s",
        "peer_consume_ack_msgs_per_s",
        "peer_publish_single_msgs_per_s",
        "peer_rtt_p99_ms",
        "ratio_vs_peer",
        "ratio_receive_delete_vs_peer",
        "ratio_single_vs_peer",
        "ratio_rtt_p50_vs_peer",
        "floor_fdatasync_p50_ms",
        "floor_lmdb_commit_p50_ms",
        "floor_http_rtt_p50_ms",
        "floor_http_single_msgs_per_s",
        "rtt_floor_ms",
    ):
        assert isinstance(result[name], int | float), name
        assert result[name] > 0, name
    assert result["rtt_p50_ms"] <= result["rtt_p99_ms"]
    # The floor is fdatasync + the bare HTTP round trip + issue 18's 0.3 ms.
    floor = result["floor_fdatasync_p50_ms"] + result["floor_http_rtt_p50_ms"] + 0.3
    assert result["rtt_floor_ms"] == pytest.approx(floor, abs=0.002)
    assert isinstance(result["rtt_within_floor"], bool)
    # The client's CPU at the peer's single-send rate: its CPU per request against
    # the bare server times that rate.
    need = (
        result["peer_publish_single_msgs_per_s"] * result["client_cpu_us_per_msg_fl_single"] / 1e6
    )
    assert result["client_cores_for_peer_single_rate"] == pytest.approx(need, abs=0.02)
    assert result["client_cores_for_peer_single_rate"] > 0
    # Every message enqueued in the batch phase was received and deleted.
    counts = result["counts"]
    assert counts["dq_consume"] == counts["dq_batch"] > 0
    assert counts["js_consume"] == counts["js_batch"] > 0
    # Progress went to stderr, so stdout is exactly the JSON line.
    assert "dynaq enqueue" in done.stderr


def test_chaos_short_run_reports_a_clean_verdict() -> None:
    """``python -m bench chaos`` for 4 s (two kill -9s of an LMDB node), end to end."""
    done = _run("chaos", "--duration", "4", "--interval", "1.5", "--seed", "3")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["scenario"] == "chaos" and result["storage"] == "embedded"
    assert result["ok"] is True and result["kills"] >= 1
    assert result["acked"] > 0 and result["lost"] == 0
    for name in ("order_violations", "dedup_violations", "id_reuse"):
        assert result[name] == 0, name
    assert sum(result["duplicate_causes"].values()) == result["duplicates"]
    assert "kill 1" in done.stderr  # progress went to stderr


def test_a_verdict_that_is_not_ok_is_the_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import types

    from bench import __main__ as bench_main

    failing = types.SimpleNamespace(main=lambda argv: {"scenario": "fake", "ok": False})
    monkeypatch.setattr(bench_main, "scenarios", lambda: ["fake"])
    monkeypatch.setattr(importlib, "import_module", lambda name: failing)
    assert bench_main.main(["fake"]) == 1
    passing = types.SimpleNamespace(main=lambda argv: {"scenario": "fake", "ok": True})
    monkeypatch.setattr(importlib, "import_module", lambda name: passing)
    assert bench_main.main(["fake"]) == 0


@pytest.mark.slow
def test_queue_storage_riak_quick_reports_each_backend() -> None:
    """``--storage riak`` runs the embedded store first as the yardstick, then a real Riak."""
    from dynaq.testing.servers import riak

    why = riak.available()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "queue", "--quick", "--storage", "riak"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["scenario"] == "queue-backends" and result["yardstick"] == "embedded"
    for backend in ("embedded", "riak"):
        row = result[backend]
        assert row["errors"] == 0
        assert row["enqueue_msgs_per_s"] > 0 and row["receive_delete_msgs_per_s"] > 0
        assert row["consumed"] > 0


def test_streams_quick_reports_both_systems_and_loses_nothing() -> None:
    """``python -m bench streams --quick``: 5,000 entries appended and replayed by a real
    node and a real JetStream; the issue's figures are all in the JSON line."""
    _need_peer()
    done = _run("streams", "--quick")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["scenario"] == "streams" and result["peer"] == "nats-jetstream"
    for name in (
        "append_entries_per_s",
        "replay_entries_per_s",
        "peer_append_entries_per_s",
        "peer_replay_entries_per_s",
        "append_ratio",
        "replay_ratio",
    ):
        assert isinstance(result[name], int | float) and result[name] > 0, name
    assert result["lost"] == 0
    assert {"replication_lag_p99_ms", "failover_s"} <= set(result)
    assert "dynaq replay" in done.stderr
