"""The client side of ``python -m bench queue``: load-generating processes.

Each client process (multiprocessing, spawn) runs one phase at a time as the
parent sends it: connect, answer "ready", wait for "go", run its connections
until the phase's message budget or time bound is spent, and send back what
it measured (counts, first/last useful answer, its own CPU, latencies).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnProcess
from multiprocessing.sharedctypes import Synchronized
from typing import Any

import msgpack

from bench.common import Deadline, percentiles, process_tree_cpu_s, rate

BODY_BYTES = 256
BATCH = 100
QUEUE = "bench"
STREAM = "BENCH"
SUBJECT = "bench.q"
DURABLE = "bench"
MSGPACK = "application/msgpack"
_HDR = {"Content-Type": MSGPACK, "Accept": MSGPACK}


@dataclass(frozen=True)
class Spec:
    """One phase as one client process runs it."""

    kind: str
    target: str  # dynaq base URL or nats:// URL
    conns: int
    budget: int  # messages this process may send (enqueue phases)
    expected: int  # messages all processes together should consume (consume phases)
    seconds: float


@dataclass
class Outcome:
    """What one client process measured in one phase."""

    count: int = 0
    errors: int = 0
    t_first: float = 0.0
    t_last: float = 0.0
    cpu_s: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)


class _Shared:
    """State of one process's connections in one phase (one event loop, no locks)."""

    def __init__(self, spec: Spec, consumed: Synchronized[int]) -> None:
        self.spec = spec
        self.left = spec.budget
        self.out = Outcome()
        self.deadline = Deadline(spec.seconds)
        self.consumed = consumed

    def claim(self, n: int) -> int:
        """Take up to ``n`` messages of the budget; 0 when spent or out of time."""
        if self.left <= 0 or self.deadline.expired():
            return 0
        n = min(n, self.left)
        self.left -= n
        return n

    def done(self, n: int) -> None:
        self.out.count += n
        self.out.t_last = time.monotonic()

    def add_consumed(self, n: int) -> bool:
        """Count consumed messages across processes; True when all were consumed."""
        with self.consumed.get_lock():
            self.consumed.value += n
            return bool(self.consumed.value >= self.spec.expected)

    def all_consumed(self) -> bool:
        return bool(self.consumed.value >= self.spec.expected)


def _body() -> bytes:
    return os.urandom(BODY_BYTES)


async def _dq_batch(session: Any, sh: _Shared) -> None:
    url = f"{sh.spec.target}/v2/queues/{QUEUE}/messages"
    body = _body()
    full = msgpack.packb({"messages": [{"body": body}] * BATCH}, use_bin_type=True)
    while n := sh.claim(BATCH):
        data = full if n == BATCH else msgpack.packb({"messages": [{"body": body}] * n})
        async with session.post(url, data=data, headers=_HDR) as r:
            raw = await r.read()
        if r.status != 200 or len(msgpack.unpackb(raw)["ids"]) != n:
            sh.out.errors += 1
            continue
        sh.done(n)


async def _dq_consume(session: Any, sh: _Shared) -> None:
    recv = f"{sh.spec.target}/v2/queues/{QUEUE}/messages/receive"
    delete = f"{sh.spec.target}/v2/queues/{QUEUE}/messages/delete"
    ask = msgpack.packb({"max_messages": BATCH})
    empties = 0
    while not sh.deadline.expired() and not sh.all_consumed():
        async with session.post(recv, data=ask, headers=_HDR) as r:
            raw = await r.read()
        if r.status != 200:
            sh.out.errors += 1
            continue
        ids = [m["id"] for m in msgpack.unpackb(raw)["messages"]]
        if not ids:
            empties += 1
            if empties >= 20:
                break
            await asyncio.sleep(0.02)
            continue
        empties = 0
        async with session.post(delete, data=msgpack.packb({"ids": ids}), headers=_HDR) as r:
            raw = await r.read()
        if r.status != 200 or msgpack.unpackb(raw)["deleted"] != len(ids):
            sh.out.errors += 1
        sh.done(len(ids))
        if sh.add_consumed(len(ids)):
            break


async def _dq_single(session: Any, sh: _Shared, timed: bool) -> None:
    url = f"{sh.spec.target}/v1/queues/{QUEUE}/message"
    body = _body()
    while sh.claim(1):
        t0 = time.perf_counter()
        async with session.put(url, data=body) as r:
            text = await r.text()
        if timed:
            sh.out.latencies_ms.append((time.perf_counter() - t0) * 1000)
        if r.status != 200 or not text.isdigit():
            sh.out.errors += 1
            continue
        sh.done(1)


# The same phases through the client library (dynaq.client.AsyncClient), to
# measure what it costs over raw HTTP: same requests, same batch sizes.


async def _lb_batch(client: Any, sh: _Shared) -> None:
    body = _body()
    full = [body] * BATCH
    while n := sh.claim(BATCH):
        try:
            ids = await client.enqueue(QUEUE, full if n == BATCH else [body] * n)
        except Exception:  # noqa: BLE001 - counted, the phase goes on
            sh.out.errors += 1
            continue
        if len(ids) != n:
            sh.out.errors += 1
            continue
        sh.done(n)


async def _lb_consume(client: Any, sh: _Shared) -> None:
    empties = 0
    while not sh.deadline.expired() and not sh.all_consumed():
        try:
            got = await client.receive(QUEUE, BATCH)
        except Exception:  # noqa: BLE001 - counted, the phase goes on
            sh.out.errors += 1
            continue
        if not got:
            empties += 1
            if empties >= 20:
                break
            await asyncio.sleep(0.02)
            continue
        empties = 0
        ids = [m.id for m in got]
        try:
            if await client.delete(QUEUE, ids) != len(ids):
                sh.out.errors += 1
        except Exception:  # noqa: BLE001
            sh.out.errors += 1
        sh.done(len(ids))
        if sh.add_consumed(len(ids)):
            break


async def _lb_single(client: Any, sh: _Shared) -> None:
    body = _body()
    while sh.claim(1):
        t0 = time.perf_counter()
        try:
            await client.send(QUEUE, body)
        except Exception:  # noqa: BLE001
            sh.out.errors += 1
            continue
        sh.out.latencies_ms.append((time.perf_counter() - t0) * 1000)
        sh.done(1)


async def _js_batch(js: Any, sh: _Shared) -> None:
    body = _body()
    while n := sh.claim(BATCH):
        futures = [await js.publish_async(SUBJECT, body) for _ in range(n)]
        acks = await asyncio.gather(*futures, return_exceptions=True)
        bad = sum(1 for a in acks if isinstance(a, BaseException))
        sh.out.errors += bad
        sh.done(n - bad)


async def _js_consume(js: Any, sh: _Shared) -> None:
    sub = await js.pull_subscribe_bind(durable=DURABLE, stream=STREAM)
    empties = 0
    while not sh.deadline.expired() and not sh.all_consumed():
        try:
            msgs = await sub.fetch(BATCH, timeout=0.5)
        except TimeoutError:  # nats.errors.TimeoutError is one too
            empties += 1
            if empties >= 4:
                break
            continue
        empties = 0
        for m in msgs:
            await m.ack()
        sh.done(len(msgs))
        if sh.add_consumed(len(msgs)):
            break
    await sub.unsubscribe()


async def _js_single(js: Any, sh: _Shared, timed: bool) -> None:
    body = _body()
    while sh.claim(1):
        t0 = time.perf_counter()
        try:
            await js.publish(SUBJECT, body)
        except Exception:  # noqa: BLE001 - a failed publish is counted, the run goes on
            sh.out.errors += 1
            continue
        if timed:
            sh.out.latencies_ms.append((time.perf_counter() - t0) * 1000)
        sh.done(1)


async def _run_spec(spec: Spec, conn: Connection, consumed: Synchronized[int]) -> Outcome:
    """Connect, report ready, wait for "go", run the phase, report what happened."""
    loop = asyncio.get_running_loop()
    closers: list[Any] = []
    tasks: list[Any] = []
    if spec.kind.startswith("dq_"):
        import aiohttp

        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=spec.conns, force_close=False),
            timeout=aiohttp.ClientTimeout(total=max(30.0, spec.seconds * 2)),
        )
        closers.append(session.close)
        clients: list[Any] = [session] * spec.conns
    elif spec.kind.startswith("lb_"):
        from dynaq.client import AsyncClient

        lib = AsyncClient(
            spec.target, timeout_s=max(30.0, spec.seconds * 2), connections=spec.conns
        )
        closers.append(lib.close)
        clients = [lib] * spec.conns
    else:
        import nats

        clients = []
        for _ in range(spec.conns):
            nc = await nats.connect(spec.target, max_reconnect_attempts=0)
            closers.append(nc.close)
            clients.append(nc.jetstream(timeout=30.0))
    try:
        conn.send("ready")
        await loop.run_in_executor(None, conn.recv)  # "go"
        sh = _Shared(spec, consumed)
        cpu0 = time.process_time()
        sh.out.t_first = sh.out.t_last = time.monotonic()
        for c in clients:
            if spec.kind == "dq_batch":
                tasks.append(_dq_batch(c, sh))
            elif spec.kind == "dq_consume":
                tasks.append(_dq_consume(c, sh))
            elif spec.kind in ("dq_single", "dq_rtt"):
                tasks.append(_dq_single(c, sh, timed=True))
            elif spec.kind == "lb_batch":
                tasks.append(_lb_batch(c, sh))
            elif spec.kind == "lb_consume":
                tasks.append(_lb_consume(c, sh))
            elif spec.kind in ("lb_single", "lb_rtt"):
                tasks.append(_lb_single(c, sh))
            elif spec.kind == "js_batch":
                tasks.append(_js_batch(c, sh))
            elif spec.kind == "js_consume":
                tasks.append(_js_consume(c, sh))
            else:
                tasks.append(_js_single(c, sh, timed=True))
        await asyncio.gather(*tasks)
        sh.out.cpu_s = time.process_time() - cpu0
        return sh.out
    finally:
        for close in closers:
            await close()


def _worker(conn: Connection, consumed: Synchronized[int]) -> None:
    """A client process: runs phases sent over ``conn`` until it receives None."""
    while True:
        spec = conn.recv()
        if spec is None:
            return
        try:
            out = asyncio.run(_run_spec(spec, conn, consumed))
        except Exception:  # noqa: BLE001 - reported to the parent, which fails the run
            conn.send(f"error in phase {spec.kind}:\n{traceback.format_exc()}")
            continue
        conn.send(out)


@dataclass
class PhaseResult:
    count: int
    errors: int
    wall_s: float
    msgs_per_s: float
    client_cpu_s: float
    server_cpu_s: float
    latency_ms: dict[str, float]


class ClientPool:
    """P client processes that run each phase together and report their outcomes."""

    def __init__(self, procs: int) -> None:
        ctx = mp.get_context("spawn")
        self.consumed: Synchronized[int] = ctx.Value("q", 0)
        self._pipes: list[Connection] = []
        self._procs: list[SpawnProcess] = []
        for _ in range(procs):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(child, self.consumed), daemon=True)
            p.start()
            self._pipes.append(parent)
            self._procs.append(p)

    @property
    def size(self) -> int:
        return len(self._procs)

    def _recv(self, pipe: Connection, timeout_s: float) -> Any:
        if not pipe.poll(timeout_s):
            raise RuntimeError(f"a client process did not answer within {timeout_s:.0f} s")
        msg = pipe.recv()
        if isinstance(msg, str) and msg.startswith("error"):
            raise RuntimeError(f"client process failed: {msg}")
        return msg

    def run(self, specs: list[Spec], server_pid: int) -> PhaseResult:
        """Run one phase (one spec per process) and aggregate; bounded by the specs' time."""
        with self.consumed.get_lock():
            self.consumed.value = 0
        for pipe, spec in zip(self._pipes, specs, strict=True):
            pipe.send(spec)
        for pipe in self._pipes:
            self._recv(pipe, 60.0)  # "ready"
        cpu0 = process_tree_cpu_s(server_pid)
        for pipe in self._pipes:
            pipe.send("go")
        bound = max(s.seconds for s in specs) * 2 + 60.0
        outs: list[Outcome] = [self._recv(pipe, bound) for pipe in self._pipes]
        server_cpu = process_tree_cpu_s(server_pid) - cpu0
        count = sum(o.count for o in outs)
        first = min(o.t_first for o in outs)
        last = max(o.t_last for o in outs)
        wall = max(last - first, 1e-9)
        lat = [x for o in outs for x in o.latencies_ms]
        return PhaseResult(
            count=count,
            errors=sum(o.errors for o in outs),
            wall_s=wall,
            msgs_per_s=rate(count, wall),
            client_cpu_s=sum(o.cpu_s for o in outs),
            server_cpu_s=server_cpu,
            latency_ms=percentiles(lat),
        )

    def close(self) -> None:
        for pipe in self._pipes:
            with contextlib.suppress(OSError):
                pipe.send(None)
        for p in self._procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)
