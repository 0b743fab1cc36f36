"""A node of two workers serving HTTPS: the workers reach each other on loopback
whatever names the node's certificate holds (here ``localhost`` only, no
``127.0.0.1``), so hints, ring polls and long polls across workers still work."""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from dynaq.testing.process import free_port, launch_cwd
from tests.fixtures.tls import make_self_signed

pytestmark = pytest.mark.timeout(180)


def _launch(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "dynaq", "server"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=launch_cwd(),
        )


@contextlib.asynccontextmanager
async def _https_node(tmp: Path, ctx: ssl.SSLContext) -> AsyncIterator[str]:
    """A node of two workers on HTTPS, its certificate valid for ``localhost`` only."""
    cert = await asyncio.to_thread(make_self_signed, tmp / "tls", ip_san=False)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
    env.update(
        {
            "DYNAQ_HTTP_WORKERS": "2",
            "DYNAQ_HTTP_PORT": str(port),
            "DYNAQ_DATA_DIR": str(tmp / "data"),
            "DYNAQ_STATS_TYPE": "none",
            "DYNAQ_HTTP_TLS_CERT": str(cert.cert),
            "DYNAQ_HTTP_TLS_KEY": str(cert.key),
            "DYNAQ_HTTP_TLS_CA": str(cert.cert),
        }
    )
    await asyncio.to_thread(ctx.load_verify_locations, cafile=str(cert.cert))
    proc = await asyncio.to_thread(_launch, env, tmp / "node.log")
    try:
        yield f"https://localhost:{port}"
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 60)


async def _workers(http: aiohttp.ClientSession, url: str, ctx: ssl.SSLContext) -> dict[str, str]:
    """Wait until both workers serve and see each other; their private URLs."""
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, "the workers never converged"
        try:
            async with http.get(f"{url}/v2/status/workers", ssl=ctx) as r:
                members = {w["name"]: w["http"] for w in (await r.json())["live"]}
            if len(members) == 2:
                ok = True
                for addr in members.values():
                    async with http.get(f"http://{addr}/health") as r:
                        ok = ok and r.status == 200 and (await r.json())["workers_live"] == 2
                if ok:
                    return {n: f"http://{a}" for n, a in members.items()}
        except (aiohttp.ClientError, OSError):
            pass
        await asyncio.sleep(0.2)


async def test_workers_of_an_https_node_reach_each_other_on_loopback(tmp_path: Path) -> None:
    ctx = ssl.create_default_context()
    async with _https_node(tmp_path, ctx) as url, aiohttp.ClientSession() as http:
        workers = await _workers(http, url, ctx)
        w0, w1 = workers["dynaq-1-w0"], workers["dynaq-1-w1"]
        async with http.put(f"{url}/v1/queues/t", ssl=ctx) as r:
            assert r.status in (200, 201)
        for i in range(4):
            # A long poll on w0, woken by an enqueue on w1 (a hint or a watch).
            ask = {"max_messages": 1, "wait_time_s": 10}
            poll = asyncio.ensure_future(http.post(f"{w0}/v2/queues/t/messages/receive", json=ask))
            await asyncio.sleep(0.3)
            t0 = time.monotonic()
            async with http.put(f"{w1}/v1/queues/t/message", data=f"m{i}") as r:
                assert r.status == 200
                mid = await r.text()
            async with await poll as r:
                got = await r.json()
            assert [str(m["id"]) for m in got["messages"]] == [mid.strip('"')]
            assert time.monotonic() - t0 < 1.9
            async with http.post(
                f"{url}/v2/queues/t/messages/delete",
                json={"ids": [int(mid.strip('"'))]},
                ssl=ctx,
            ) as r:
                assert r.status == 200
