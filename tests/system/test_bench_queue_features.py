"""Smoke test of ``python -m bench queue_features --quick``: it runs end to end and
reports its named figures (the full run's numbers are in the README)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_queue_features_quick_reports_named_positive_figures() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "queue_features", "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["scenario"] == "queue_features"
    for name in (
        "plain_enqueue_msgs_per_s",
        "featured_enqueue_msgs_per_s",
        "plain_consume_msgs_per_s",
        "featured_consume_msgs_per_s",
        "redrive_msgs_per_s",
        "delayed_msgs_per_s",
        "single_plain_msgs_per_s",
        "single_group_dedup_msgs_per_s",
    ):
        assert result[name] > 0, name
    assert result["enqueue_ratio"] > 0 and result["consume_ratio"] > 0
