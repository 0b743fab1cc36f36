"""Shared by the fault tests: the verdict assertion, its printed figures, and libfaketime.

Every fault test runs :func:`dynaq.testing.run_workload` with a fault plan and
ends with :func:`assert_verdict`, which prints one ``FAULT-RESULT {json}``
line (``pytest -s`` shows it; the README's fault table is made from them) and
fails the test on any lost message, order or dedup violation, reused id or
unexplained duplicate. Duplicates are allowed, counted and printed with their
causes.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from dynaq.client import AsyncClient
from dynaq.testing import Cluster
from dynaq.testing.history import History
from dynaq.testing.verdict import Verdict, check, timeline

COMPLETION_TOPIC = "batch-done"
"""The nodes' ``batches.completion_topic`` in fault runs (``batches_completion_topic=``):
the workload reads each batch's completion events from it (``Workload(completion_topic=)``)."""

FAKETIME_LIBS = (
    Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"),
    Path("/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1"),
    Path("/usr/lib/faketime/libfaketime.so.1"),
)


def missing(reason: str) -> None:
    """Skip the test on a laptop; fail it in CI (``CI=true``), where everything must run."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (required in CI)")
    pytest.skip(reason)


def faketime_lib() -> Path:
    """Debian's libfaketime (``scripts/deps/faketime.sh``); skips or fails when absent."""
    for lib in FAKETIME_LIBS:
        if lib.is_file():
            return lib
    missing("libfaketime is not installed (scripts/deps/faketime.sh: apt-get install libfaketime)")
    raise AssertionError("unreachable")


def faketime_env(offset: str) -> dict[str, str]:
    """Environment that runs a process with its clock shifted by ``offset`` (``"-1h"``,
    ``"+1h"``), through libfaketime.

    libfaketime shifts the monotonic clock too (it then reads as the shifted
    wall clock): still steady, so intervals are right. It is not left alone
    (``FAKETIME_DONT_FAKE_MONOTONIC``): measured with libfaketime 0.9.10, that
    mode slows every clock call enough that a node on Cassandra answered
    receives in 4-8 s instead of 0.1 s, and the drain, not the code, failed.
    """
    return {
        "LD_PRELOAD": str(faketime_lib()),
        "FAKETIME": offset if offset[0] in "+-" else f"+{offset}",
    }


def stepped_clock_env(control: Path) -> dict[str, str]:
    """Environment that runs a process whose wall clock the test steps while it runs:
    write an offset (``"-1h"``, ``"+1h"``, ``"+0"``) to ``control`` with :func:`step_clock`.

    Measured with libfaketime 0.9.10 (``tests/faults`` README row): a step
    through ``FAKETIME_TIMESTAMP_FILE`` moves the monotonic clock too (a
    real NTP step never does; asyncio's timers would stall for the hour), so
    the monotonic clock is left alone (``FAKETIME_DONT_FAKE_MONOTONIC``) and
    only ``time.time()`` steps, as on a real host. In that mode Python's
    ``time.sleep`` fails with EINVAL (libfaketime mistranslates its absolute
    monotonic deadline); nodes never call it (an event loop waits in epoll).
    ``FAKETIME_CACHE_DURATION=1`` rereads the file once a second: a step takes
    effect within a second, and a clock call costs 0.8 µs instead of the 20 µs
    of ``FAKETIME_NO_CACHE``.
    """
    step_clock(control, "+0")
    return {
        "LD_PRELOAD": str(faketime_lib()),
        "FAKETIME_TIMESTAMP_FILE": str(control),
        "FAKETIME_CACHE_DURATION": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def step_clock(control: Path, offset: str) -> None:
    """Step the wall clock of the processes reading ``control`` to ``offset`` from true time."""
    tmp = control.with_suffix(".tmp")
    tmp.write_text(offset + "\n")
    tmp.replace(control)  # atomic: a reader never sees an empty file


def have(program: str) -> bool:
    return shutil.which(program) is not None or Path("/usr/sbin", program).exists()


def verdict_figures(v: Verdict, h: History, wall_s: float, **extra: Any) -> dict[str, Any]:
    """The figures one fault run reports (what the README's table lists)."""
    return {
        **v.figures(),
        "responses": dict(sorted(h.responses.items())),
        "drained": h.drained,
        "wall_s": round(wall_s, 1),
        **extra,
    }


async def assert_verdict(
    name: str, h: History, wall_s: float, *, artifacts: Path | None = None, **extra: Any
) -> Verdict:
    """Check ``h``, print its figures, and fail on any must-be-zero figure.

    On failure the whole history is written to ``artifacts/history.json``.
    """
    v = check(h)
    figures = verdict_figures(v, h, wall_s, **extra)
    print(f"\nFAULT-RESULT {json.dumps({'fault': name, **figures})}")
    if not v.ok and artifacts is not None:
        await asyncio.to_thread((artifacts / "history.json").write_text, h.dump())
    assert v.acked > 0, f"{name}: nothing was acknowledged: {figures}"
    assert v.lost == 0, f"{name}: acknowledged messages lost: {v.examples}"
    assert v.order_violations == 0, f"{name}: group order violated: {v.examples}"
    assert v.dedup_violations == 0, f"{name}: dedup violated: {v.examples}"
    assert v.id_reuse == 0, f"{name}: ids reused: {v.examples}"
    assert v.batch_violations == 0, (
        f"{name}: batches completed other than once: {v.examples}"
        + await _log_lines(artifacts, [str(b[0]) for b in v.examples.get("batch", [])])
    )
    unexplained = v.duplicate_causes.get("unexplained", 0)
    assert unexplained == 0, (
        f"{name}: {unexplained} unexplained duplicates: {v.examples}\n"
        + timeline(h, set(v.examples.get("unexplained_duplicate", [])))
    )
    return v


async def _log_lines(artifacts: Path | None, needles: list[str], most: int = 40) -> str:
    """The node log lines under ``artifacts`` that name any of ``needles`` (a failed
    run's own account of the batches it got wrong, for CI's output)."""
    if artifacts is None or not needles:
        return ""

    def read() -> str:
        found = [
            f"{log.name}: {line[:400]}"
            for log in sorted(artifacts.glob("*.log"))
            for line in log.read_text(errors="replace").splitlines()
            if any(n in line for n in needles)
        ]
        return "\nnode log lines naming them:\n" + "\n".join(found[-most:])

    return await asyncio.to_thread(read)


def server_errors(h: History, allowed: frozenset[int] = frozenset({503})) -> dict[str, int]:
    """Answers with a 5xx status other than ``allowed`` (a 500 is always a defect)."""
    out: dict[str, int] = {}
    for key, n in h.responses.items():
        status = key.split(" ")[1]
        if status.isdigit() and int(status) >= 500 and int(status) not in allowed:
            out[key] = n
    return out


async def kill9_and_rejoin(ring: Cluster, name: str, h: History, names: list[str]) -> None:
    """``kill -9`` one node of ``ring``, wait until the survivors dropped it, start it
    on its data dir and wait until all of ``names`` see each other; recorded in ``h``."""
    f = h.fault("kill -9", name)
    await ring.kill(name)
    await ring.wait_converged([n for n in names if n != name], timeout_s=30)
    await ring.start(name, timeout_s=60)
    await ring.wait_converged(names, timeout_s=30)
    f.ended = h.now()


async def stored_bodies(c: AsyncClient, queue: str) -> Counter[str]:
    """Every body stored in ``queue`` (in flight or not), with its count: read by
    browsing, which takes no lock, so it judges the stored state a fault left."""
    out: Counter[str] = Counter()
    start = 0
    while True:
        page = await c.browse(queue, start, 1000)
        out.update(m.body.decode() for m in page.messages)
        if page.next_from_id is None:
            return out
        start = page.next_from_id
