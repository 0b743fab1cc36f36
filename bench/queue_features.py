"""Queue features off the hot path: a plain queue against one with a redrive policy,
retention and the delay mover configured, side by side on one node, plus redrive.

``python -m bench queue_features [--quick] [--messages N] [--rounds R] [--concurrency C]``

Both queues live on the same real node and are loaded alternately, round after
round (so they see the same machine noise): batched enqueue (msgpack, 100 a
request, C connections) then receive 100 + delete. The result holds each
queue's rates and their ratio (featured / plain; 1.0 = no cost). Single sends
(one message a request, 16 connections) are timed the same way, plain against
each carrying a group and its own dedup id as every SQS FIFO send does
(``single_group_dedup_ratio``). Then a
dead-letter queue holding N messages is redriven into the plain queue at the
highest rate a task may ask for, timed until its task reads ``done``
(``redrive_msgs_per_s``); and N messages enqueued with a 1 s delay are timed
from the enqueue until all were received (``delayed_msgs_per_s``, the mover's
throughput, including the 1 s wait).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgpack

from bench.common import progress, start_node

BODY = b"x" * 256
BATCH = 100
MP = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}


async def _req(s: aiohttp.ClientSession, method: str, url: str, body: Any = None) -> Any:
    async with s.request(method, url, json=body) as r:
        if r.status >= 300:
            raise RuntimeError(f"{method} {url}: {r.status} {await r.text()}")
        return await r.json(content_type=None)


async def _enqueue(s: aiohttp.ClientSession, url: str, n: int, conns: int, **extra: Any) -> float:
    t0 = time.perf_counter()
    left = [n // BATCH]
    payload = msgpack.packb({"messages": [{"body": BODY, **extra} for _ in range(BATCH)]})

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            async with s.post(f"{url}/messages", data=payload, headers=MP) as r:
                assert r.status == 200, await r.text()
                await r.read()

    await asyncio.gather(*(worker() for _ in range(conns)))
    return (n // BATCH) * BATCH / (time.perf_counter() - t0)


async def _single_sends(
    s: aiohttp.ClientSession, url: str, n: int, conns: int, tagged: bool, tag: str
) -> float:
    """``n`` one-message enqueues from ``conns`` connections; ``tagged``: each with its
    own dedup id and one of ``conns`` groups (as every SQS FIFO send is)."""
    t0 = time.perf_counter()
    left = [n]

    async def worker(w: int) -> None:
        while left[0] > 0:
            left[0] -= 1
            m: dict[str, Any] = {"body": BODY}
            if tagged:
                m.update(group=f"g{w}", dedup_id=f"{tag}-{left[0]}")
            async with s.post(
                f"{url}/messages", data=msgpack.packb({"messages": [m]}), headers=MP
            ) as r:
                assert r.status == 200, await r.text()
                await r.read()

    await asyncio.gather(*(worker(w) for w in range(conns)))
    return n / (time.perf_counter() - t0)


async def _consume(s: aiohttp.ClientSession, url: str, n: int, conns: int, limit_s: float) -> float:
    t0 = time.perf_counter()
    got = [0]
    deadline = time.monotonic() + limit_s

    async def worker() -> None:
        while got[0] < n and time.monotonic() < deadline:
            body = msgpack.packb({"max_messages": BATCH, "wait_time_s": 0.5})
            async with s.post(f"{url}/messages/receive", data=body, headers=MP) as r:
                ids = [m["id"] for m in msgpack.unpackb(await r.read())["messages"]]
            if not ids:
                continue
            got[0] += len(ids)
            async with s.post(
                f"{url}/messages/delete", data=msgpack.packb({"ids": ids}), headers=MP
            ) as r:
                await r.read()

    await asyncio.gather(*(worker() for _ in range(conns)))
    return got[0] / (time.perf_counter() - t0)


async def _run(base: str, n: int, rounds: int, conns: int) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s:
        for q in ("plain", "featured", "dlq", "late"):
            await _req(s, "PUT", f"{base}/v1/queues/{q}")
        common = {"min_partitions": 4, "max_partitions": 16, "visibility_timeout": 120}
        await _req(s, "PATCH", f"{base}/v1/queues/plain", common)
        featured = {
            **common,
            "redrive_policy": {"dead_letter_queue": "dlq", "max_receive_count": 5},
            "retention_s": 3600,
            "delay_s": 0,
        }
        await _req(s, "PATCH", f"{base}/v1/queues/featured", featured)
        rates: dict[str, dict[str, list[float]]] = {
            q: {"enqueue": [], "consume": []} for q in ("plain", "featured")
        }
        for r in range(rounds):
            order = ("plain", "featured") if r % 2 == 0 else ("featured", "plain")
            for q in order:
                url = f"{base}/v2/queues/{q}"
                e = await _enqueue(s, url, n, conns)
                c = await _consume(s, url, n, conns, 120)
                rates[q]["enqueue"].append(e)
                rates[q]["consume"].append(c)
                progress(f"round {r + 1} {q:<9} enqueue {e:>8.0f} msgs/s  consume {c:>8.0f} msgs/s")

        # single sends: one message a request, plain against group + dedup id (FIFO-style)
        singles: dict[str, list[float]] = {"plain": [], "tagged": []}
        for r in range(rounds):
            for kind in ("plain", "tagged") if r % 2 == 0 else ("tagged", "plain"):
                url = f"{base}/v2/queues/plain"
                rate = await _single_sends(s, url, n // 4, 16, kind == "tagged", f"r{r}")
                await _consume(s, url, n // 4, conns, 120)
                singles[kind].append(rate)
                progress(f"round {r + 1} single sends x16, {kind:<6} {rate:>8.0f} msgs/s")

        # redrive: N messages in the DLQ moved to the plain queue at the fastest allowed rate
        await _enqueue(s, f"{base}/v2/queues/dlq", n, conns)
        t0 = time.perf_counter()
        task = await _req(
            s, "POST", f"{base}/v2/queues/dlq/redrive", {"to_queue": "plain", "max_per_s": 10_000}
        )
        while True:
            rec = await _req(s, "GET", f"{base}/v2/tasks/{task['id']}")
            if rec["state"] != "running":
                break
            await asyncio.sleep(0.05)
        redrive = rec["moved"] / (time.perf_counter() - t0)
        progress(f"redrive {rec['moved']} msgs: {redrive:.0f} msgs/s ({rec['state']})")
        await _consume(s, f"{base}/v2/queues/plain", rec["moved"], conns, 120)

        # delayed: enqueue with a 1 s delay, time until every one was received
        t0 = time.perf_counter()
        await _enqueue(s, f"{base}/v2/queues/late", n, conns, delay_s=1)
        await _consume(s, f"{base}/v2/queues/late", n, conns, 120)
        delayed = n / (time.perf_counter() - t0)
        progress(f"delayed {n} msgs (1 s delay) enqueue to receive: {delayed:.0f} msgs/s")

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    out: dict[str, Any] = {}
    for what in ("enqueue", "consume"):
        plain, feat = mean(rates["plain"][what]), mean(rates["featured"][what])
        out[f"plain_{what}_msgs_per_s"] = round(plain, 1)
        out[f"featured_{what}_msgs_per_s"] = round(feat, 1)
        out[f"{what}_ratio"] = round(feat / plain, 3) if plain else 0.0
    plain_single, tagged_single = mean(singles["plain"]), mean(singles["tagged"])
    out["single_plain_msgs_per_s"] = round(plain_single, 1)
    out["single_group_dedup_msgs_per_s"] = round(tagged_single, 1)
    out["single_group_dedup_ratio"] = (
        round(tagged_single / plain_single, 3) if plain_single else 0.0
    )
    out["redrive_msgs_per_s"] = round(redrive, 1)
    out["delayed_msgs_per_s"] = round(delayed, 1)
    return out


def main(argv: list[str]) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench queue_features")
    p.add_argument("--messages", type=int, default=20_000, help="messages per phase")
    p.add_argument("--rounds", type=int, default=4, help="alternating rounds per queue")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--quick", action="store_true", help="tiny smoke run")
    a = p.parse_args(argv)
    n, rounds = (1_000, 1) if a.quick else (max(BATCH, a.messages), max(1, a.rounds))
    tmp = Path(tempfile.mkdtemp(prefix="dynaq-bench-"))
    node = None
    try:
        node = start_node(tmp)
        progress(f"dynaq node at {node.url}; {n} messages a phase, {rounds} round(s)")
        figures = asyncio.run(_run(node.url, n, rounds, max(1, a.concurrency)))
    finally:
        if node is not None:
            try:
                node.terminate()
            except Exception:  # noqa: BLE001 - cleanup must reach the rmtree
                node.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return {"scenario": "queue_features", "quick": a.quick, "messages": n, **figures}
