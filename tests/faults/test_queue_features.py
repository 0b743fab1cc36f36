"""Dead letters and delays under kill -9, judged by the history checker.

One node on LMDB, restarted with kill -9 in a loop while producers and
consumers run the recorded workload against a queue with a redrive policy and
a default delay (every message, group messages included, waits 1 s under its
due time and is moved by the node's mover). Nothing acknowledged may be lost,
group order must hold across the delay and the kills, and no message may be
dead-lettered by a healthy consumer's redeliveries.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import urllib.request
from pathlib import Path

from dynaq.testing import History, Workload, run_node, run_workload
from tests.faults.helpers import assert_verdict

VT_S = 3.0


def _call(url: str, method: str, body: object | None = None) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


async def test_kill9_loop_with_dead_letters_and_delays_loses_nothing(tmp_path: Path) -> None:
    kills = 4
    rng = random.Random(15)
    async with run_node(directory=tmp_path) as node:
        for q in ("history", "history-dlq"):
            assert (await asyncio.to_thread(_call, f"{node.url}/v1/queues/{q}", "PUT"))[0] == 201
        settings = {
            "redrive_policy": {"dead_letter_queue": "history-dlq", "max_receive_count": 10},
            "delay_s": 1,
        }
        status, _ = await asyncio.to_thread(
            _call, f"{node.url}/v1/queues/history", "PATCH", settings
        )
        assert status == 200

        async def faults(h: History) -> None:
            for _ in range(kills):
                await asyncio.sleep(rng.uniform(1.5, 3.0))
                f = h.fault("kill -9", node.name)
                await node.kill()
                await node.start(timeout_s=60)
                f.ended = h.now()

        w = Workload(
            endpoints=[node.url],
            messages=3_000,
            duration_s=20.0,
            visibility_timeout_s=VT_S,
            request_timeout_s=5.0,
            drain_max_s=60.0,
            seed=15,
        )
        t0 = time.monotonic()
        h = await run_workload(w, faults)
        wall = time.monotonic() - t0
        _, desc = await asyncio.to_thread(_call, f"{node.url}/v2/queues/history-dlq", "GET")
    assert sum(f.kind == "kill -9" for f in h.faults) == kills
    assert isinstance(desc, dict) and desc["depth"] == 0  # nothing was dead-lettered
    await assert_verdict(
        "single node: kill -9 loop, DLQ policy and 1 s delay", h, wall, artifacts=tmp_path
    )
