"""At-least-once and at-most-once do what they say when a worker dies mid-step, and
queue inputs and outputs work with them."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest

from dynaq.client import AsyncClient, Client
from dynaq.processors import META, Graph, GraphRunner, queue
from dynaq.testing.process import NodeProcess
from tests.processors.harness import Harness, entries, wait_for


def _run_with_crash(
    node: NodeProcess, tmp: Path, t: str, strategy: str, fault: str
) -> Counter[int]:
    h = Harness(node, "transform", t, tmp, lease_ttl_s=0.4, env={"CUES_STRATEGY": strategy})
    with Client(node.url) as c:
        w = h.start()
        wait_for(
            lambda: any(s.name == f"_cues.{t}-g.double" for s in c.list_streams(hidden=True)),
            20,
            "declared",
        )
        assert w.terminate() == 0, w.log()
        c.append(f"{t}-in", [{"n": n} for n in range(1, 11)])
        crashing = h.start(fault)
        assert crashing.wait(20) == -9, crashing.log()
        last = h.start()

        def seen() -> set[int]:
            out = {e["n"] for e in entries(c, f"{t}-out")}
            return out | {e["inputs"][f"{t}-in"]["n"] for e in entries(c, f"{t}-err")}

        wait_for(lambda: 10 in seen(), 20, "the last input")
        assert last.terminate() == 0, last.log()
        got: Counter[int] = Counter(e["n"] for e in entries(c, f"{t}-out"))
        got += Counter(e["inputs"][f"{t}-in"]["n"] for e in entries(c, f"{t}-err"))
        return got


def test_at_least_once_repeats_the_step_a_crash_cut(node: NodeProcess, tmp_path: Path) -> None:
    # Killed after the 4th output was written, before its position was committed.
    got = _run_with_crash(node, tmp_path, "alo", "at_least_once", "effect.done:4")
    assert set(got) == set(range(1, 11)), "nothing lost"
    assert [n for n, k in got.items() if k > 1] == [4], "the cut step, and only it, twice"


def test_at_most_once_loses_the_step_a_crash_cut(node: NodeProcess, tmp_path: Path) -> None:
    # Killed after the 4th position was committed, before its output was written.
    got = _run_with_crash(node, tmp_path, "amo", "at_most_once", "position.written:4")
    assert set(got) == set(range(1, 11)) - {4}, "the cut step, and only it, lost"
    assert all(k == 1 for k in got.values()), "nothing twice"


@pytest.mark.parametrize("strategy", ["at_least_once", "at_most_once"])
async def test_queue_to_queue(node: NodeProcess, strategy: str) -> None:
    def double(entry: dict[str, int]) -> dict[str, int]:
        return {"n": entry["n"], "double": 2 * entry["n"]}

    g = Graph(f"queues-{strategy[3:7]}")
    q = g.name
    g.transform("p", double, queue(f"{q}-in"), queue(f"{q}-out"), strategy=strategy)
    async with AsyncClient(node.url) as c:
        runner = GraphRunner(g, c)
        await runner.declare()
        await c.enqueue(f"{q}-in", [json.dumps({"n": n}) for n in range(5)])
        await runner.start()
        got: list[dict[str, int]] = []
        for _ in range(100):
            for m in await c.receive(f"{q}-out", 10, 30):
                got.append(json.loads(m.body))
                await c.delete(f"{q}-out", [m.id], m.addr or None)
            if len(got) == 5:
                break
            await asyncio.sleep(0.05)
        await runner.stop()
        assert sorted((e["n"], e["double"]) for e in got) == [(n, 2 * n) for n in range(5)]
        assert all(META in e for e in got)
        assert await c.receive(f"{q}-in", 10, 30) == []  # every input deleted
        (st,) = runner.status()
        assert st["strategy"] == strategy and st["delivered"] == 5


@pytest.mark.parametrize("strategy", ["at_least_once", "at_most_once"])
async def test_positions_survive_a_restart(node: NodeProcess, strategy: str) -> None:
    g = Graph(f"pos-{strategy.split('_')[1]}")
    t = g.name
    g.transform("p", lambda e: {"n": e["n"]}, f"{t}-in", f"{t}-out", strategy=strategy)
    async with AsyncClient(node.url) as c:
        for batch in (range(0, 5), range(5, 9)):
            runner = GraphRunner(g, c)
            await runner.start()
            await c.append(f"{t}-in", [{"n": n} for n in batch])
            for _ in range(200):
                if await c.stream_size(f"{t}-out") == batch.stop:
                    break
                await asyncio.sleep(0.05)
            await runner.stop()
            assert runner.status()[0]["inputs"] == {f"{t}-in": batch.stop}
        out = [e["entry"]["n"] for e in await c.read_stream(f"{t}-out", 0, 100)]
        assert out == list(range(9))
