"""Streams on a 3-node ring (one Cassandra for the records): replication lag and failover.

* **Replication lag**: appends of 100 entries every 10 ms (10k entries/s) to
  the stream's authority with ``acks = leader`` (answered after the
  authority's fsync alone, so the copies' delay shows), once both copies
  follow; the followers' sizes are read every 2 ms from the authority's own
  ``GET /v2/streams``, and a batch's lag is the time from its answer until
  every follower reported holding it (their fsync included, and up to one
  poll). p50/p99 over the run.
* **Failover**: the authority is killed (-9) while appends go on through
  another node every 20 ms; ``failover_s`` is the time from the kill to the
  first append acknowledged again, against the ring's failure detection
  (``failure_detection_s``: until the survivors no longer list the victim).

Bounded: at most ``seconds`` of appends, 60 s for the failover.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import percentiles, progress
from dynaq.api.stream_proxy import FORWARDED_HEADER
from dynaq.testing.cluster import LocalCluster

STREAM = "lagged"
BATCH = 100
EVERY_S = 0.01


async def _copies(s: aiohttp.ClientSession, url: str) -> dict[str, int]:
    # Asked as a forwarded request, the authority lists its own streams without
    # asking its peers: one local read per poll.
    async with s.get(f"{url}/v2/streams", headers={FORWARDED_HEADER: "bench"}) as r:
        listed = await r.json()
    return next(dict(e["copies"]) for e in listed["streams"] if e["name"] == STREAM)


async def _lag(authority_url: str, seconds: float) -> list[float]:
    """Append on a timer; return each batch's lag until every copy held it (ms)."""
    entries = [{"n": 0, "pad": "x" * 230}] * BATCH
    acked: list[tuple[int, float]] = []  # (end index, answered at)
    lags: list[float] = []
    done = asyncio.Event()
    async with aiohttp.ClientSession() as s:
        # Steady state: the copies follow before the clock starts (they start within
        # the followers' refresh, a second).
        async with s.post(
            f"{authority_url}/v2/streams/{STREAM}/entries", json={"entries": entries}
        ) as r:
            warm = (await r.json())["count"]
        for _ in range(500):
            sizes = await _copies(s, authority_url)
            if sizes and min(sizes.values()) >= warm:
                break
            await asyncio.sleep(0.01)

        async def writer() -> None:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                t = time.monotonic()
                async with s.post(
                    f"{authority_url}/v2/streams/{STREAM}/entries", json={"entries": entries}
                ) as r:
                    body = await r.json()
                if r.status == 200:
                    acked.append((body["first_index"] + body["count"], time.monotonic()))
                await asyncio.sleep(max(0.0, EVERY_S - (time.monotonic() - t)))
            done.set()

        async def watcher() -> None:
            pending = 0
            while not (done.is_set() and pending >= len(acked)):
                sizes = await _copies(s, authority_url)
                low = min(sizes.values()) if sizes else 0
                now = time.monotonic()
                while pending < len(acked) and acked[pending][0] <= low:
                    lags.append((now - acked[pending][1]) * 1000)
                    pending += 1
                await asyncio.sleep(0.002)

        await asyncio.wait_for(asyncio.gather(writer(), watcher()), seconds + 30)
    return lags


async def _failover(cluster: LocalCluster, authority: str) -> dict[str, float]:
    victim = cluster.node(authority)
    other = next(n for n in cluster.nodes if n.name != authority)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s:
        t0 = time.monotonic()
        await asyncio.to_thread(victim.kill)
        detected: float | None = None
        while time.monotonic() - t0 < 60:
            if detected is None:
                async with s.get(f"{other.url}/v1/status/servers") as r:
                    if f"Member: {authority} " not in await r.text():
                        detected = time.monotonic() - t0
            try:
                async with s.post(
                    f"{other.url}/v2/streams/{STREAM}/entries", json={"entries": [{"n": 1}]}
                ) as r:
                    if r.status == 200:
                        return {
                            "failover_s": round(time.monotonic() - t0, 3),
                            "failure_detection_s": round(detected or time.monotonic() - t0, 3),
                        }
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.02)
    raise TimeoutError("no append was acknowledged within 60 s of killing the authority")


def run(tmp: Path, cassandra_host: str, seconds: float) -> dict[str, Any]:
    """The ring figures of ``python -m bench streams``."""
    (tmp / "ring").mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster(
        tmp / "ring",
        3,
        backend="cassandra",
        cassandra_hosts=[cassandra_host],
        keyspace=f"bench_streams_{int(time.time())}",
        env={"DYNAQ_STREAMS_ACKS": "leader"},
    )
    with cluster:
        url = cluster.urls[0]

        async def setup() -> str:
            body = {"schema": {"type": "object", "required": ["n"]}, "order_key": None}
            async with aiohttp.ClientSession() as s:
                async with s.put(f"{url}/v2/streams/{STREAM}", json=body) as r:
                    if r.status != 201:
                        raise RuntimeError(f"declare failed: {r.status} {await r.text()}")
                async with s.get(f"{url}/v2/streams") as r:
                    listed = await r.json()
            return next(str(e["node"]) for e in listed["streams"] if e["name"] == STREAM)

        authority = asyncio.run(setup())
        lags = asyncio.run(_lag(cluster.node(authority).url, seconds))
        p = percentiles(lags)
        progress(
            f"replication lag over {len(lags)} batches: p50 {p['p50']:.1f} ms, p99 {p['p99']:.1f} ms"
        )
        failover = asyncio.run(_failover(cluster, authority))
        progress(f"failover: {failover}")
    return {
        "replication_lag_p50_ms": round(p["p50"], 2),
        "replication_lag_p99_ms": round(p["p99"], 2),
        "replication_batches": len(lags),
        "replication_rate_entries_per_s": round(BATCH / EVERY_S),
        **failover,
    }
