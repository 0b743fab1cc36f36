"""Streams: durable batched append and replay over HTTP, against NATS JetStream in the same run.

dynaq: a real node; ``POST /v2/streams/bench/entries`` with batches of 256-byte
entries (msgpack bodies) from several connections, each acknowledged after
the group commit's fsync; then one listener replays the whole stream with
``GET /v2/streams/bench?nowait=true`` (Sherlock's JSON lines) and the client
counts lines. JetStream: a real ``nats-server -js`` with a file-storage
stream; the same batches published with ``publish_async`` and their acks
awaited, then an ordered consumer (push, flow-controlled) replays it all.
Then, unless ``--no-ring`` (or ``--quick``), a 3-node ring on a Cassandra
started for the run gives the replication lag and the failover time
(:mod:`bench.streams_ring`).

What limits each is reported as CPU seconds per side: the server's from
``/proc``, the client's from this process. The run checks that the replay
returned every appended entry, densely numbered (``lost``).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from bench._nats import NatsServer
from bench.common import fsync_latency_ms, process_cpu_s, progress, rate, start_node

ENTRY_BYTES = 256
STREAM = "bench"
JS_STREAM = "SBENCH"
JS_SUBJECT = "sbench.e"


@dataclass(frozen=True)
class Options:
    entries: int
    batch: int
    concurrency: int
    peer: bool
    ring: bool = False
    ring_seconds: float = 10.0


def parse(argv: list[str]) -> Options:
    p = argparse.ArgumentParser(prog="python -m bench streams", description=__doc__.split("\n")[0])
    p.add_argument("--entries", type=int, default=1_000_000, help="entries appended, then replayed")
    p.add_argument("--batch", type=int, default=1000, help="entries per append request")
    p.add_argument("--concurrency", type=int, default=4, help="appending connections")
    p.add_argument("--no-peer", action="store_true", help="skip NATS JetStream")
    p.add_argument("--no-ring", action="store_true", help="skip the 3-node ring (Cassandra)")
    p.add_argument("--ring-seconds", type=float, default=10.0, help="appends timed for lag")
    p.add_argument("--quick", action="store_true", help="tiny smoke run (a few seconds)")
    a = p.parse_args(argv)
    if a.quick:
        return Options(5_000, 500, 2, not a.no_peer)
    return Options(
        max(1, a.entries),
        max(1, a.batch),
        max(1, a.concurrency),
        not a.no_peer,
        ring=not a.no_ring,
        ring_seconds=max(1.0, min(120.0, a.ring_seconds)),
    )


def _entry() -> dict[str, Any]:
    """An entry whose JSON form is exactly ENTRY_BYTES bytes."""
    return {"id": "e", "pad": "x" * (ENTRY_BYTES - len('{"id":"e","pad":""}'))}


def _split(total: int, size: int) -> list[int]:
    return [min(size, total - i) for i in range(0, total, size)]


@dataclass
class Phase:
    count: int
    wall_s: float
    server_cpu_s: float
    client_cpu_s: float

    @property
    def per_s(self) -> float:
        return rate(self.count, self.wall_s)

    def row(self) -> dict[str, float]:
        return {
            "entries_per_s": round(self.per_s),
            "wall_s": round(self.wall_s, 3),
            "server_cpu_s": round(self.server_cpu_s, 3),
            "client_cpu_s": round(self.client_cpu_s, 3),
        }


async def _timed(pid: int, work: Any) -> tuple[Any, float, float, float]:
    cpu0, scpu0, t0 = time.process_time(), process_cpu_s(pid), time.monotonic()
    out = await work
    wall = time.monotonic() - t0
    return out, wall, process_cpu_s(pid) - scpu0, time.process_time() - cpu0


# --------------------------------------------------------------------------- dynaq


async def _dq_append(url: str, o: Options) -> int:
    import aiohttp

    batches = _split(o.entries, o.batch)
    bodies = {n: msgpack.packb({"entries": [_entry()] * n}) for n in set(batches)}
    headers = {"Content-Type": "application/msgpack"}
    done = 0

    async def conn(session: aiohttp.ClientSession) -> None:
        nonlocal done
        while batches:
            n = batches.pop()
            async with session.post(
                f"{url}/v2/streams/{STREAM}/entries", data=bodies[n], headers=headers
            ) as r:
                if r.status != 200:
                    raise RuntimeError(f"append failed: {r.status} {await r.text()}")
                done += (await r.json())["count"]

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as s:
        await asyncio.gather(*(conn(s) for _ in range(o.concurrency)))
    return done


async def _dq_replay(url: str) -> tuple[int, int]:
    """Count the replayed lines; return (count, last index + 1 seen)."""
    import aiohttp

    count, tail = 0, b""
    timeout = aiohttp.ClientTimeout(total=600)
    async with (
        aiohttp.ClientSession(timeout=timeout) as s,
        s.get(f"{url}/v2/streams/{STREAM}", params={"nowait": "true"}) as r,
    ):
        async for chunk in r.content.iter_chunked(1 << 20):
            count += chunk.count(b"\n")
            tail = (tail + chunk)[-4096:]
    lines = tail.rstrip(b"\n").split(b"\n")
    last = int(lines[-1].split(b",")[0].split(b":")[1]) if count else -1
    return count, last + 1


async def _dq_setup(url: str) -> None:
    import aiohttp

    body = {"schema": {"type": "object", "required": ["id"]}, "order_key": None}
    async with aiohttp.ClientSession() as s, s.put(f"{url}/v2/streams/{STREAM}", json=body) as r:
        if r.status != 201:
            raise RuntimeError(f"could not declare the stream: {r.status} {await r.text()}")


# --------------------------------------------------------------------------- JetStream


async def _js_append(url: str, o: Options) -> int:
    import nats
    from nats.js.api import StorageType, StreamConfig

    payload = msgpack.packb(_entry())[:ENTRY_BYTES].ljust(ENTRY_BYTES, b"x")
    batches = _split(o.entries, o.batch)
    conns = [await nats.connect(url) for _ in range(o.concurrency)]
    done = 0
    try:
        js0 = conns[0].jetstream()
        await js0.add_stream(
            StreamConfig(name=JS_STREAM, subjects=[JS_SUBJECT], storage=StorageType.FILE)
        )

        async def conn(nc: Any) -> None:
            nonlocal done
            js = nc.jetstream(timeout=60.0)
            while batches:
                n = batches.pop()
                futures = [await js.publish_async(JS_SUBJECT, payload) for _ in range(n)]
                for ack in await asyncio.gather(*futures):
                    _ = ack.seq
                done += n

        await asyncio.gather(*(conn(nc) for nc in conns))
    finally:
        for nc in conns:
            await nc.close()
    return done


async def _js_replay(url: str, expected: int) -> tuple[int, int]:
    import nats

    nc = await nats.connect(url)
    got = 0
    last_seq = 0
    finished = asyncio.Event()

    async def on_msg(msg: Any) -> None:
        nonlocal got, last_seq
        got += 1
        last_seq = msg.metadata.sequence.stream
        if got >= expected:
            finished.set()

    try:
        js = nc.jetstream()
        sub = await js.subscribe(JS_SUBJECT, cb=on_msg, ordered_consumer=True)
        try:
            await asyncio.wait_for(finished.wait(), 600)
        finally:
            await sub.unsubscribe()
    finally:
        await nc.close()
    return got, last_seq


# --------------------------------------------------------------------------- the run


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


def main(argv: list[str]) -> dict[str, Any]:
    o = parse(argv)
    tmp = Path(tempfile.mkdtemp(prefix="dynaq-bench-streams-"))
    node = None
    peer: NatsServer | None = None
    res: dict[str, Phase] = {}
    lost = 0
    disk: dict[str, float] = {}
    try:
        node = start_node(tmp)
        assert node.proc is not None
        disk = fsync_latency_ms(tmp, 50 if o.entries < 100_000 else 200)
        progress(f"disk: write+fdatasync p50 {disk['p50']:.2f} ms, p99 {disk['p99']:.2f} ms")
        pid = node.proc.pid
        asyncio.run(_dq_setup(node.url))
        progress(f"dynaq node pid {pid}; {o.entries} entries of {ENTRY_BYTES} bytes")
        n, wall, scpu, ccpu = asyncio.run(_timed(pid, _dq_append(node.url, o)))
        res["dq_append"] = Phase(n, wall, scpu, ccpu)
        progress(f"dynaq append x{o.concurrency}, batches of {o.batch}: {res['dq_append'].row()}")
        (count, next_index), wall, scpu, ccpu = asyncio.run(_timed(pid, _dq_replay(node.url)))
        res["dq_replay"] = Phase(count, wall, scpu, ccpu)
        progress(f"dynaq replay (HTTP, jsonl): {res['dq_replay'].row()}")
        lost += n - count + abs(next_index - count)
        if o.peer:
            peer = NatsServer(tmp)
            jpid = peer.pid
            n, wall, scpu, ccpu = asyncio.run(_timed(jpid, _js_append(peer.url, o)))
            res["js_append"] = Phase(n, wall, scpu, ccpu)
            progress(f"jetstream publish_async x{o.concurrency}: {res['js_append'].row()}")
            (count, last), wall, scpu, ccpu = asyncio.run(_timed(jpid, _js_replay(peer.url, n)))
            res["js_replay"] = Phase(count, wall, scpu, ccpu)
            progress(f"jetstream ordered consumer: {res['js_replay'].row()}")
            if count != n or last != n:
                progress(f"jetstream replay returned {count} of {n} (last seq {last})")
    finally:
        if peer is not None:
            peer.stop()
        if node is not None:
            try:
                node.terminate()
            except Exception:  # noqa: BLE001 - cleanup must reach the rmtree
                node.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    ring = _ring(o) if o.ring else {}
    dq_a, dq_r = res["dq_append"], res["dq_replay"]
    js_a, js_r = res.get("js_append"), res.get("js_replay")
    return {
        "scenario": "streams",
        "entries": o.entries,
        "entry_bytes": ENTRY_BYTES,
        "batch": o.batch,
        "concurrency": o.concurrency,
        "append_entries_per_s": round(dq_a.per_s),
        "replay_entries_per_s": round(dq_r.per_s),
        "peer": "nats-jetstream" if js_a else "none",
        "peer_append_entries_per_s": round(js_a.per_s) if js_a else None,
        "peer_replay_entries_per_s": round(js_r.per_s) if js_r else None,
        "append_ratio": _ratio(dq_a.per_s, js_a.per_s) if js_a else None,
        "replay_ratio": _ratio(dq_r.per_s, js_r.per_s) if js_r else None,
        "phases": {k: v.row() for k, v in res.items()},
        "peer_fsyncs_before_ack": False,
        "disk_fsync_ms": {k: round(v, 2) for k, v in disk.items()},
        "replication_lag_p99_ms": ring.get("replication_lag_p99_ms"),
        "failover_s": ring.get("failover_s"),
        "ring": ring or None,
        "lost": lost,
    }


def _ring(o: Options) -> dict[str, Any]:
    from bench import streams_ring
    from dynaq.testing.servers import cassandra as cassandra_server

    why = cassandra_server.available()
    if why is not None:
        raise SystemExit(f"bench streams' ring phase needs Cassandra ({why}); or --no-ring")
    tmp = Path(tempfile.mkdtemp(prefix="dynaq-bench-streams-ring-"))
    progress("starting Cassandra for the ring phase")
    server = cassandra_server.start_cassandra(tmp / "cassandra")
    try:
        return streams_ring.run(tmp, server.host, o.ring_seconds)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
