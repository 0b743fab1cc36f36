"""Batch tracking: exact-mode item acks per second, and storage per item.

``python -m bench batches [--items N] [--per-request R] [--concurrency C] [--seconds S]
[--baseline-seconds B] [--quick]``

1. A real ``dynaq server`` (LMDB, fsync'd group commits) opens an exact batch
   and adds N items (default 1,000,000) in one request; the store's allocated
   size before and after gives **bytes per item** (bitfield blocks of 4096
   items plus their keys and LMDB pages).
2. The batch is closed; C concurrent clients (default 32) ack every item in
   requests of R ids (default 100), shuffled so requests hit every block, with
   10 % duplicate acks mixed in. Reported: **item_acks_per_s** (distinct and
   duplicate acks counted, as the server does the work for both) and request
   latency p50/p99; exactly one request must report the completion.

For comparison in the same session, the estimated mode's ``decr`` of the same
number of items, one ``{batchId, by: R}`` per request, shows the cost of
exactness. Every dynaq phase is bounded by ``--seconds``.

3. The same-run yardstick (issue 18): Carlyle's own algorithms on their own
   stores (:mod:`bench._carlyle`), a real MariaDB (InnoDB, a redo-log flush per
   commit) and a real ``redis-server`` started on free 127.0.0.1 ports in
   throwaway dirs, driven with the same items, the same shuffled acks (same
   duplicates), the same request size and the same number of clients, each
   phase bounded by ``--baseline-seconds``. Reported:
   ``carlyle_exact_items_per_s`` and ``carlyle_estimated_items_per_s``, and
   ``ratio_vs_carlyle_exact`` = ``item_acks_per_s`` / the first,
   ``ratio_vs_carlyle_estimated`` = ``estimated_item_acks_per_s`` / the second
   (targets: >= 3). Redis runs as Carlyle deploys it, in memory with no
   append-only file; since dynaq's decrements are fsync'd, the same phase is
   also run on a second Redis with ``appendfsync always``
   (``carlyle_estimated_aof_items_per_s``, ``ratio_vs_carlyle_estimated_aof``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench._carlyle import CarlyleEstimated, CarlyleExact
from bench.common import Deadline, percentiles, progress, rate, start_node

EXACT = "/api/v1/batch/exact"
EST = "/api/v1/batch/estimated"


def _allocated_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in data_dir.rglob("*") if p.is_file())


async def _post(s: aiohttp.ClientSession, url: str, body: Any) -> Any:
    async with s.post(url, json=body) as r:
        out = await r.json()
        if r.status != 200:
            raise RuntimeError(f"{url}: {r.status} {out}")
        return out


async def _run_requests(
    s: aiohttp.ClientSession,
    url: str,
    bodies: list[Any],
    concurrency: int,
    deadline: Deadline,
) -> tuple[float, list[float], list[Any], int]:
    queue: asyncio.Queue[Any] = asyncio.Queue()
    for b in bodies:
        queue.put_nowait(b)
    lat: list[float] = []
    results: list[Any] = []
    sent = 0

    async def client() -> None:
        nonlocal sent
        while not queue.empty() and not deadline.expired():
            body = queue.get_nowait()
            t = time.monotonic()
            results.append(await _post(s, url, body))
            lat.append((time.monotonic() - t) * 1000)
            sent += 1

    t0 = time.monotonic()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return time.monotonic() - t0, lat, results, sent


def _ack_order(items: int) -> list[int]:
    """Which item each ack names: every item once plus 10 % duplicates, shuffled."""
    rng = random.Random(1)
    order = list(range(items))
    order += rng.sample(order, items // 10)
    rng.shuffle(order)
    return order


async def _bench(
    base: str, data_dir: Path, args: argparse.Namespace, order: list[int]
) -> dict[str, Any]:
    deadline = Deadline(args.seconds)
    out: dict[str, Any] = {"scenario": "batches", "items": args.items}
    conn = aiohttp.TCPConnector(limit=args.concurrency)
    async with aiohttp.ClientSession(base_url=base, connector=conn) as s:
        before = _allocated_bytes(data_dir)
        b = (await _post(s, EXACT, {"userKey": "bench"}))["batchId"]
        t = time.monotonic()
        blocks = (await _post(s, f"{EXACT}/items", {"batchId": b, "items": args.items}))[
            "batchItemGroupIds"
        ]
        out["add_items_s"] = round(time.monotonic() - t, 3)
        await asyncio.sleep(0.5)  # let the group commit reach the disk
        grown = _allocated_bytes(data_dir) - before
        out["storage_bytes_per_item"] = round(grown / args.items, 3)
        progress(
            f"added {args.items} items in {len(blocks)} blocks in {out['add_items_s']} s; "
            f"store grew {grown / 1e6:.2f} MB = {out['storage_bytes_per_item']} bytes/item"
        )
        assert (await _post(s, f"{EXACT}/close/{b}", None))["isComplete"] is False
        ids = [f"{b}:{g['id']}:{i}" for g in blocks for i in range(g["upto"])]
        work = [ids[k] for k in order]
        per = args.per_request
        bodies = [{"batchItemIds": work[i : i + per]} for i in range(0, len(work), per)]
        secs, lat, results, sent = await _run_requests(
            s, f"{EXACT}/items/ack", bodies, args.concurrency, deadline
        )
        acks = min(sent * per, len(work))
        completions = sum(len(r["batchCompletions"]) for r in results)
        p = percentiles(lat)
        out.update(
            item_acks_per_s=round(rate(acks, secs)),
            ack_requests_per_s=round(rate(sent, secs)),
            ack_p50_ms=round(p["p50"], 2),
            ack_p99_ms=round(p["p99"], 2),
            acks_sent=acks,
            completions=completions,
        )
        progress(
            f"exact: {acks} item acks ({per}/request, {args.concurrency} clients) in {secs:.2f} s"
            f" = {out['item_acks_per_s']} acks/s, p50 {p['p50']:.1f} ms p99 {p['p99']:.1f} ms,"
            f" completions reported: {completions}"
        )
        # Estimated mode, same item count: the price of exactness.
        e = (await _post(s, EST, {"userKey": "bench"}))["batchId"]
        await _post(s, f"{EST}/{e}/incr?by={args.items}", None)
        await _post(s, f"{EST}/{e}/close", None)
        est_bodies = [{"acks": [{"batchId": e, "by": per}]} for _ in range(0, len(work), per)]
        secs, lat, _, sent = await _run_requests(
            s, f"{EST}/decr", est_bodies, args.concurrency, deadline
        )
        out["estimated_item_acks_per_s"] = round(rate(min(sent * per, len(work)), secs))
        out["estimated_p99_ms"] = round(percentiles(lat)["p99"], 2)
        progress(f"estimated: {out['estimated_item_acks_per_s']} acks/s (decr by {per})")
    return out


async def _carlyle(
    args: argparse.Namespace, order: list[int], mariadb: Any, redis: Any, redis_aof: Any
) -> dict[str, Any]:
    """Carlyle's exact (MariaDB) and estimated (Redis) modes, dynaq's workload."""
    per, conc = args.per_request, args.concurrency
    exact = CarlyleExact(mariadb.host, mariadb.port, mariadb.user, mariadb.database)
    await exact.create_schema()
    t = time.monotonic()
    batch, blocks = await exact.open_and_add(args.items)
    add_s = time.monotonic() - t
    assert await exact.close_batch(batch) is False
    ids = [f"{batch}:{g}:{i}" for g, upto in blocks for i in range(upto)]
    work = [ids[k] for k in order]
    done = await exact.run(work, per, conc, Deadline(args.baseline_seconds))
    out = done.summary("carlyle_exact")
    out["carlyle_exact_add_items_s"] = round(add_s, 3)
    progress(
        f"carlyle exact (MariaDB): {done.items} item acks in {done.seconds:.2f} s"
        f" = {out['carlyle_exact_items_per_s']} acks/s, p99 {out['carlyle_exact_p99_ms']} ms"
    )
    requests = -(-len(order) // per)
    for server, name in ((redis, "carlyle_estimated"), (redis_aof, "carlyle_estimated_aof")):
        est = CarlyleEstimated(server.url)
        key = await est.open_add_close(args.items)
        done = await est.run(key, requests, per, conc, Deadline(args.baseline_seconds))
        out.update(done.summary(name))
        # Once at zero every decrement answers "complete" (the estimate's double counting).
        del out[f"{name}_completions"]
        progress(
            f"{name} (Redis{', appendfsync always' if server is redis_aof else ''}):"
            f" {done.items} item decrements in {done.seconds:.2f} s"
            f" = {out[f'{name}_items_per_s']} /s"
        )
    return out


def _baselines(args: argparse.Namespace, order: list[int]) -> dict[str, Any]:
    """Start MariaDB and Redis (both must be there: a missing one is an error), run, stop."""
    from dynaq.testing.servers import mariadb as mariadb_server
    from dynaq.testing.servers import redis as redis_server

    for why in (mariadb_server.available(), redis_server.available()):
        if why is not None:
            raise RuntimeError(f"the batches yardstick needs it: {why}")
    progress("starting MariaDB and redis-server for Carlyle's baseline")
    maria = mariadb_server.start_mariadb(durable=True)
    try:
        redis = redis_server.start_redis()
        redis_aof = None
        try:
            redis_aof = redis_server.start_redis(durable=True)
            return asyncio.run(_carlyle(args, order, maria, redis, redis_aof))
        finally:
            redis.stop()
            if redis_aof is not None:
                redis_aof.stop()
    finally:
        maria.stop()


def _ratio(ours: float, theirs: float) -> float:
    return round(ours / theirs, 2) if theirs > 0 else 0.0


def main(argv: list[str]) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench batches", description=__doc__)
    p.add_argument("--items", type=int, default=1_000_000)
    p.add_argument("--per-request", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--seconds", type=float, default=120.0, help="bound on the dynaq phases")
    p.add_argument(
        "--baseline-seconds", type=float, default=60.0, help="bound on each Carlyle phase"
    )
    p.add_argument("--quick", action="store_true", help="tiny smoke run")
    args = p.parse_args(argv)
    if args.quick:
        args.items, args.seconds, args.baseline_seconds = 20_000, 30.0, 8.0
    order = _ack_order(args.items)
    with tempfile.TemporaryDirectory(prefix="dynaq-bench-batches-") as tmp:
        node = start_node(Path(tmp))
        try:
            progress(f"dynaq node at {node.url}")
            result = asyncio.run(_bench(node.url, node.data_dir, args, order))
        finally:
            node.terminate()
    result.update(_baselines(args, order))
    result["ratio_vs_carlyle_exact"] = _ratio(
        result["item_acks_per_s"], result["carlyle_exact_items_per_s"]
    )
    result["ratio_vs_carlyle_estimated"] = _ratio(
        result["estimated_item_acks_per_s"], result["carlyle_estimated_items_per_s"]
    )
    result["ratio_vs_carlyle_estimated_aof"] = _ratio(
        result["estimated_item_acks_per_s"], result["carlyle_estimated_aof_items_per_s"]
    )
    result["cpu_count"] = os.cpu_count()
    return result
