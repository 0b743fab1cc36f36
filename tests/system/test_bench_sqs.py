"""Smoke test of ``python -m bench sqs --quick``: it runs end to end and
reports its named figures (the full run's numbers are in the README)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_sqs_quick_reports_named_positive_figures() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "sqs", "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["scenario"] == "sqs"
    for name in (
        "sqs_send_batch_msgs_per_s",
        "sqs_receive_delete_msgs_per_s",
        "peer_send_batch_msgs_per_s",
        "peer_receive_delete_msgs_per_s",
        "send_ratio_vs_peer",
        "receive_delete_ratio_vs_peer",
    ):
        assert result[name] > 0, name
    assert result["peer"].startswith("moto")
