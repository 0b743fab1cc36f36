"""Helpers for tests of a node of several workers (``http.workers``): find the
workers of a running node and wait until they all serve it."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import aiohttp

from dynaq.node.workers import ROLE_ENV, WorkerRole
from dynaq.testing.runners import NodeServer


def worker_pids(node: NodeServer) -> list[int]:
    """The supervisor's children (its workers), from ``/proc`` (Linux)."""
    proc = node.process.proc
    assert proc is not None
    path = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    text = path.read_text() if path.exists() else ""
    return [int(p) for p in text.split() if not _is_store_writer(int(p))]


def worker_pid(node: NodeServer, index: int) -> int:
    """The process id of worker ``index`` (read from its role in its environment)."""
    for pid in worker_pids(node):
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        role = next(v for v in environ if v.startswith(ROLE_ENV.encode() + b"="))
        if WorkerRole.decode(role.split(b"=", 1)[1].decode()).index == index:
            return pid
    raise LookupError(f"no worker {index} under the node")


def store_writer_pid(node: NodeServer) -> int | None:
    """The supervisor's store writer process (``embedded.writer = "process"``)."""
    proc = node.process.proc
    assert proc is not None
    path = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    text = path.read_text() if path.exists() else ""
    return next((int(p) for p in text.split() if _is_store_writer(int(p))), None)


def _is_store_writer(pid: int) -> bool:
    try:
        return b"embedded_writer_child" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


async def pids_of(node: NodeServer) -> list[int]:
    """:func:`worker_pids`, read in a worker thread."""
    return await asyncio.to_thread(worker_pids, node)


def url_node(worker: str) -> str:
    """The node a worker belongs to (``dynaq-1-w0`` → ``dynaq-1``)."""
    return worker.rpartition("-w")[0]


async def health_nodes(url: str, tries: int) -> set[str]:
    """The worker names answering ``/health`` over ``tries`` fresh connections."""
    seen: set[str] = set()
    for _ in range(tries):
        # A fresh connection each time: SO_REUSEPORT picks a worker per connection.
        async with aiohttp.ClientSession() as http, http.get(f"{url}/health") as r:
            if r.status == 200:
                body = await r.json()
                # One node to its clients: its own name, one member, and the worker.
                assert body["node"] == url_node(body["worker"]) and body["members"] == 1, body
                seen.add(body["worker"])
    return seen


async def wait_workers(node: NodeServer, count: int, timeout_s: float = 60.0) -> None:
    """Wait until ``count`` workers run, each serving and seeing all ``count``
    members (the ring of workers converged)."""
    deadline = time.monotonic() + timeout_s
    want = {f"{node.name}-w{i}" for i in range(count)}
    while True:
        pids = await pids_of(node)
        if len(pids) == count and await _converged(node.url, want):
            return
        assert time.monotonic() < deadline, f"workers never converged:\n{node.log()}"
        await asyncio.sleep(0.2)


async def _live_workers(http: aiohttp.ClientSession, url: str) -> dict[str, str]:
    """The live workers ``/v2/status/workers`` lists: name → private address."""
    async with http.get(f"{url}/v2/status/workers") as r:
        body = await r.json()
    return {w["name"]: w["http"] for w in body["live"]}


async def _converged(url: str, want: set[str]) -> bool:
    try:
        async with aiohttp.ClientSession() as http:
            live = await _live_workers(http, url)
            if set(live) != want:
                return False
            # Each worker's own view (through its private address) must agree.
            for addr in live.values():
                async with http.get(f"http://{addr}/health") as r:
                    body = await r.json()
                    if r.status != 200 or body["workers_live"] != len(want):
                        return False
    except (aiohttp.ClientError, KeyError, ValueError):
        return False
    return True


async def worker_urls(node: NodeServer) -> dict[str, str]:
    """Each worker's private URL (it serves the whole API too), by worker name."""
    async with aiohttp.ClientSession() as http:
        live = await _live_workers(http, node.url)
    return {name: f"http://{addr}" for name, addr in live.items()}


def kill9(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
