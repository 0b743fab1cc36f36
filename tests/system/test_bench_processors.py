"""``python -m bench processors --quick`` end to end: the three strategies, the plain
loop and the crash runs report named positive figures and a clean verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_processors_quick_reports_every_strategy_and_a_clean_crash_verdict() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "processors", "--quick", "--seed", "7"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["scenario"] == "processors"
    for name in (
        "exactly_once_msgs_per_s",
        "at_least_once_msgs_per_s",
        "at_most_once_msgs_per_s",
        "plain_loop_msgs_per_s",
        "ratio_exactly_once_vs_at_most_once",
        "ratio_exactly_once_vs_plain_loop",
    ):
        assert isinstance(result[name], int | float) and result[name] > 0, name
    assert result["crash_runs"] == 3 and result["crash_inputs"] > 0
    assert result["lost"] == 0 and result["duplicated"] == 0 and result["ok"] is True
    assert "crash run 3/3" in done.stderr
