"""A network partition: one node of a Cassandra ring cut from its peers and the store.

The test makes two network namespaces and two veth pairs of its own (see
``partition_scenario.py`` for the layout; every address lives inside those
namespaces, none in the host's) and runs the scenario inside them as a
subprocess: Cassandra, two nodes and the workload in W, the third node in P,
the cluster link cut for a few seconds under load, then healed. Needs root
(``ip netns``); without it the test is skipped, and in CI it fails saying
which command was refused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from dynaq.testing.process import ROOT
from tests.faults.helpers import missing

TIMEOUT_S = 300


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=False)


def _make_namespaces(w: str, p: str) -> str | None:
    """Create W and P joined by the cluster link ``cl`` and the client link ``cli``;
    ``None`` when done, else what failed (the command and its error)."""
    steps = [
        ["netns", "add", w],
        ["netns", "add", p],
        ["-n", w, "link", "set", "lo", "up"],
        ["-n", p, "link", "set", "lo", "up"],
        ["-n", w, "link", "add", "cl", "type", "veth", "peer", "name", "cl", "netns", p],
        ["-n", w, "link", "add", "cli", "type", "veth", "peer", "name", "cli", "netns", p],
        ["-n", w, "addr", "add", "10.77.0.1/30", "dev", "cl"],
        ["-n", p, "addr", "add", "10.77.0.2/30", "dev", "cl"],
        ["-n", w, "addr", "add", "10.78.0.1/30", "dev", "cli"],
        ["-n", p, "addr", "add", "10.78.0.2/30", "dev", "cli"],
        *(["-n", ns, "link", "set", dev, "up"] for ns in (w, p) for dev in ("cl", "cli")),
    ]
    for step in steps:
        done = _ip(*step)
        if done.returncode != 0:
            return f"`ip {' '.join(step)}` failed: {done.stderr.strip()}"
    return None


def _remove_namespaces(*names: str) -> None:
    for ns in names:
        _ip("netns", "del", ns)


def _run(w: str, p: str, tmp: Path) -> dict[str, Any]:
    out = tmp / "verdict.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    cmd = ["ip", "netns", "exec", w, sys.executable, "-m", "tests.faults.partition_scenario"]
    cmd += ["--ns-p", p, "--tmp", str(tmp), "--out", str(out)]
    with open(tmp / "scenario.log", "wb") as log:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = proc.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(10)
            code = -9
    log_tail = (tmp / "scenario.log").read_text(errors="replace")[-4000:]
    assert code == 0 and out.exists(), f"the partition scenario failed ({code}):\n{log_tail}"
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def test_a_node_cut_from_its_peers_and_the_store_loses_nothing(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        missing("the partition test needs root and iproute2 (ip netns)")
    tag = f"dq{os.getpid() % 100000}"
    w, p = f"{tag}w", f"{tag}p"
    failed = _make_namespaces(w, p)
    try:
        if failed is not None:
            missing(f"cannot build the partition's network namespaces here: {failed}")
        r = _run(w, p, tmp_path)
    finally:
        _remove_namespaces(w, p)
    print(f"\nFAULT-RESULT {json.dumps({'fault': 'ring: partition of one node', **r})}")
    assert "detected_s" in r and "healed_s" in r, r
    assert r["all_alive_at_end"], r
    assert r["lost"] == 0, r["examples"]
    assert r["id_reuse"] == 0 and r["dedup_violations"] == 0, r["examples"]
    assert r["order_violations"] == 0, r["examples"]
    assert r["duplicate_causes"].get("unexplained", 0) == 0, r["examples"]
    errors = {
        k: n for k, n in r["responses"].items() if k.split(" ")[1] not in ("200", "503", "exc")
    }
    assert not any(k.split(" ")[1].startswith("5") for k in errors), r["responses"]
    assert r["ok"], r
