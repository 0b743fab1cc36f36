"""Exactly once under the failures a deployment sees: a worker kill -9'd at random
times while inputs keep arriving, and two workers racing for the same processor
(the lease lets one step at a time; each kill moves it to the other)."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from dynaq.client import Client
from dynaq.testing.process import NodeProcess
from tests.processors import checker
from tests.processors.checker import deliveries
from tests.processors.harness import Harness, Worker, wait_for


class Feeder(threading.Thread):
    """Appends ``{"n"}`` entries to an input in small batches (about 100 a second, below
    what one worker processes even on a busy machine) until stopped or ``limit``."""

    def __init__(self, url: str, stream: str, pause_s: float = 0.05, limit: int = 2500) -> None:
        super().__init__(daemon=True)
        self.url, self.stream, self.pause_s, self.limit = url, stream, pause_s, limit
        self.sent: list[int] = []
        self.halt = threading.Event()

    def run(self) -> None:
        with Client(self.url) as c:
            n = 0
            while not self.halt.is_set() and n < self.limit:
                batch = list(range(n + 1, n + 6))
                c.append(self.stream, [{"n": i} for i in batch])
                self.sent.extend(batch)
                n += 5
                time.sleep(self.pause_s)


def _declare(h: Harness, c: Client) -> None:
    w = h.start()
    wait_for(
        lambda: any(s.name.startswith(f"_cues.{h.prefix}-g.") for s in c.list_streams(hidden=True)),
        20,
        "the graph's streams",
    )
    assert w.terminate() == 0, w.log()


def _drain(h: Harness, c: Client, t: str, sent: list[int]) -> None:
    last = h.start()

    def done() -> bool:
        got = {int(e["n"]) for e in deliveries(c, f"{t}-out")}
        got |= {int(e["inputs"][f"{t}-in"]["n"]) for e in deliveries(c, f"{t}-err")}
        return got >= set(sent)

    wait_for(done, 120, "every input delivered")
    assert last.terminate() == 0, last.log()


@pytest.mark.slow
def test_kill_9_at_random_times_under_load(node: NodeProcess, tmp_path: Path) -> None:
    t = "kill9"
    h = Harness(node, "transform", t, tmp_path, lease_ttl_s=0.4)
    rng = random.Random(1409)
    kills = 0
    with Client(node.url) as c:
        _declare(h, c)
        feeder = Feeder(node.url, f"{t}-in")
        feeder.start()
        try:
            for _ in range(20):
                w = h.start()
                time.sleep(rng.uniform(0.3, 1.0))
                assert w.proc.poll() is None, w.log()
                w.kill()
                kills += 1
        finally:
            feeder.halt.set()
            feeder.join()
        _drain(h, c, t, feeder.sent)
        summary = checker.check_transform(c, t, feeder.sent)
    assert summary["outputs"] > 500 and kills == 20
    print(f"kill -9: {kills} kills, {len(feeder.sent)} inputs, {summary}")


@pytest.mark.slow
def test_two_workers_race_for_one_processor(node: NodeProcess, tmp_path: Path) -> None:
    t = "race"
    h = Harness(node, "transform", t, tmp_path, lease_ttl_s=0.4)
    rng = random.Random(2718)
    with Client(node.url) as c:
        _declare(h, c)
        feeder = Feeder(node.url, f"{t}-in")
        feeder.start()
        workers: list[Worker] = [h.start(), h.start()]
        every: list[Worker] = list(workers)
        try:
            holder_kills = 0
            for round in range(10):
                wait_for(lambda: any(_runs(w) for w in workers), 20, "a worker holding the lease")
                time.sleep(rng.uniform(0.2, 0.6))
                ran_before = sum(_runs(w) for w in every)
                holders = [i for i, w in enumerate(workers) if _runs(w)]
                # Mostly the holder dies (the standby takes over); sometimes the standby.
                holder = round % 3 != 2
                i = holders[-1] if holder else 1 - holders[-1]
                workers[i].kill()
                workers[i] = h.start()
                every.append(workers[i])
                if holder:
                    holder_kills += 1
                    wait_for(
                        lambda n=ran_before: sum(_runs(w) for w in every) > n,
                        20,
                        "another worker taking the lease over",
                    )
        finally:
            feeder.halt.set()
            feeder.join()
        for w in workers:
            w.kill()
        _drain(h, c, t, feeder.sent)
        summary = checker.check_transform(c, t, feeder.sent)
    # The processor really ran in several workers, one after another.
    ran = [w for w in every if _runs(w)]
    assert holder_kills == 7 and len(ran) >= 1 + holder_kills, "each holder kill moved the lease"
    assert summary["outputs"] > 300
    print(f"race: ran in {len(ran)} of {len(every)} workers, {len(feeder.sent)} inputs, {summary}")


def _runs(w: Worker) -> bool:
    """Whether ``w`` took the processor's lease and ran it (its log says so)."""
    try:
        return b'"processor running"' in w.log_path.read_bytes()
    except OSError:
        return False
