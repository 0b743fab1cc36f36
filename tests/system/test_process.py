"""A real ``dynaq server`` process: durability under kill -9, graceful SIGTERM, CLI, env."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import msgpack
import pytest

from dynaq import __version__
from dynaq.core.access import token_digest
from dynaq.testing.cluster import LocalCluster, http_get
from dynaq.testing.process import NodeProcess, free_port, node_process

MP = {"Content-Type": "application/msgpack", "Accept": "application/msgpack"}


async def _enqueue_batches(url: str, queue: str, batches: int, size: int) -> list[int]:
    ids: list[int] = []
    async with aiohttp.ClientSession(url) as s:
        async with s.put(f"/v1/queues/{queue}") as r:
            assert r.status in (201, 422)

        async def one(b: int) -> list[int]:
            payload = {"messages": [{"body": b"%d-%d" % (b, i)} for i in range(size)]}
            async with s.post(
                f"/v2/queues/{queue}/messages", data=msgpack.packb(payload), headers=MP
            ) as r:
                assert r.status == 200
                return list(msgpack.unpackb(await r.read())["ids"])

        for chunk in await asyncio.gather(*(one(b) for b in range(batches))):
            ids.extend(chunk)
    return ids


async def _drain(url: str, queue: str) -> set[int]:
    got: set[int] = set()
    async with aiohttp.ClientSession(url) as s:
        while True:
            async with s.post(
                f"/v2/queues/{queue}/messages/receive",
                data=msgpack.packb({"max_messages": 1000}),
                headers=MP,
            ) as r:
                msgs = msgpack.unpackb(await r.read())["messages"]
            if not msgs:
                return got
            got.update(m["id"] for m in msgs)


@pytest.mark.slow
async def test_acknowledged_enqueues_survive_kill_9(node_proc: NodeProcess) -> None:
    await asyncio.to_thread(node_proc.start)
    ids = await _enqueue_batches(node_proc.url, "durable", batches=200, size=50)
    assert len(set(ids)) == 10_000
    await asyncio.to_thread(node_proc.kill)  # SIGKILL right after the last acknowledgement
    await asyncio.to_thread(node_proc.start)
    assert await _drain(node_proc.url, "durable") == set(ids)


async def test_kill_9_during_concurrent_load_loses_no_acknowledged_message(
    node_proc: NodeProcess,
) -> None:
    await asyncio.to_thread(node_proc.start)
    acked: list[int] = []
    stop = asyncio.Event()

    async def writer(s: aiohttp.ClientSession, w: int) -> None:
        n = 0
        while not stop.is_set() and n < 2000:
            payload = {"messages": [{"body": b"w%d-%d" % (w, n + i)} for i in range(10)]}
            try:
                async with s.post(
                    "/v2/queues/crash/messages", data=msgpack.packb(payload), headers=MP
                ) as r:
                    if r.status == 200:
                        acked.extend(msgpack.unpackb(await r.read())["ids"])
            except (aiohttp.ClientError, ConnectionError):
                return  # the node died under us: this batch was never acknowledged
            n += 10

    async with aiohttp.ClientSession(node_proc.url) as s:
        async with s.put("/v1/queues/crash") as r:
            assert r.status == 201
        tasks = [asyncio.create_task(writer(s, w)) for w in range(8)]
        await asyncio.sleep(0.5)
        await asyncio.to_thread(node_proc.kill)
        stop.set()
        await asyncio.gather(*tasks)
    assert len(acked) > 0
    await asyncio.to_thread(node_proc.start)
    stored = await _drain(node_proc.url, "crash")
    assert set(acked) <= stored


async def test_sigterm_drains_and_exits_cleanly(node_proc: NodeProcess) -> None:
    await asyncio.to_thread(node_proc.start)
    async with aiohttp.ClientSession(node_proc.url) as s, s.put("/v1/queues/q") as r:
        assert r.status == 201
    assert await asyncio.to_thread(node_proc.terminate) == 0
    log = await asyncio.to_thread(node_proc.log)
    assert '"msg": "node draining"' in log and '"msg": "node stopped"' in log
    assert "Traceback" not in log


async def test_sigterm_answers_long_polls_and_requests_in_flight(node_proc: NodeProcess) -> None:
    await asyncio.to_thread(node_proc.start)
    async with aiohttp.ClientSession(node_proc.url) as s:
        async with s.put("/v1/queues/lp") as r:
            assert r.status == 201

        async def long_poll() -> tuple[int, object]:
            async with s.post(
                "/v2/queues/lp/messages/receive", json={"max_messages": 1, "wait_time_s": 20}
            ) as r:
                return r.status, await r.json()

        polls = [asyncio.create_task(long_poll()) for _ in range(3)]
        await asyncio.sleep(0.3)
        t0 = time.monotonic()
        node_proc.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        results = await asyncio.gather(*polls)
        assert all(r == (200, {"messages": []}) for r in results)
        assert time.monotonic() - t0 < 5  # not the 20 s of the poll
    assert await asyncio.to_thread(node_proc.terminate) == 0


async def test_sigterm_while_a_body_is_arriving_answers_and_stores_it(
    node_proc: NodeProcess,
) -> None:
    """A request whose body is still on its way when SIGTERM comes is answered once
    the body is complete, and its message is stored (aiohttp's own shutdown
    dropped the rest of the body, and the request with it)."""
    await asyncio.to_thread(node_proc.start)
    async with aiohttp.ClientSession(node_proc.url) as s, s.put("/v1/queues/slow") as r:
        assert r.status == 201
    reader, writer = await asyncio.open_connection("127.0.0.1", node_proc.port)
    head = b"PUT /v1/queues/slow/message HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n"
    writer.write(head + b"hello")
    await writer.drain()
    await asyncio.sleep(0.3)
    node_proc.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    await asyncio.sleep(0.5)
    writer.write(b"world")
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(1000), 8)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert await asyncio.to_thread(node_proc.proc.wait, 20) == 0  # type: ignore[union-attr]
    node_proc.proc = None
    await asyncio.to_thread(node_proc.start)  # same data dir
    async with aiohttp.ClientSession(node_proc.url) as s, s.get("/v1/queues/slow/messages/10") as r:
        assert [m["body"] for m in await r.json()] == ["helloworld"]
    assert await asyncio.to_thread(node_proc.terminate) == 0


async def test_repeated_sigterms_still_exit_cleanly(node_proc: NodeProcess) -> None:
    """A supervisor that asks again (or a second Ctrl-C) while the node drains or
    exits must not turn its clean exit into death by signal: SIGTERM every 5 ms
    until the process is gone, and the exit status is still 0."""
    await asyncio.to_thread(node_proc.start)
    async with aiohttp.ClientSession(node_proc.url) as s, s.put("/v1/queues/q") as r:
        assert r.status == 201
    proc = node_proc.proc
    assert proc is not None
    deadline = time.monotonic() + 20
    sent = 0
    while proc.poll() is None and time.monotonic() < deadline:
        # Two at once (the second lands while the first is being handled), then
        # one every 5 ms: a node that stops in a few ms still gets more than one.
        for _ in range(2 if sent == 0 else 1):
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
                sent += 1
        await asyncio.sleep(0.005)
    assert proc.wait(5) == 0 and sent > 1
    log = await asyncio.to_thread(node_proc.log)
    assert '"msg": "node stopped"' in log and "Traceback" not in log


def test_env_overrides_and_health(tmp_path: Path) -> None:
    p = node_process(tmp_path, "env-node", env={"DYNAQ_LOG_FORMAT": "text"})
    try:
        p.start()
        import json
        import urllib.request

        with urllib.request.urlopen(p.url + "/health") as r:
            assert json.loads(r.read())["node"] == "env-node"
        assert (p.data_dir / "lmdb").is_dir()
    finally:
        p.kill()


def test_cli_version_and_migrate(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "dynaq", "version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"dynaq {__version__}"
    env = {"DYNAQ_DATA_DIR": str(tmp_path / "d"), "PATH": "/usr/bin:/bin"}
    first = subprocess.run(
        [sys.executable, "-m", "dynaq", "migrate"], capture_output=True, text=True, env=env
    )
    assert first.returncode == 0, first.stderr
    assert "initialised" in first.stdout
    again = subprocess.run(
        [sys.executable, "-m", "dynaq", "migrate"], capture_output=True, text=True, env=env
    )
    assert "up to date" in again.stdout


def test_cli_rejects_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[http]\nport = "eighty"\n')
    out = subprocess.run(
        [sys.executable, "-m", "dynaq", "server", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2
    assert "http.port" in out.stderr
    env_bad = subprocess.run(
        [sys.executable, "-m", "dynaq", "migrate"],
        capture_output=True,
        text=True,
        env={"DYNAQ_HTTP_PORT": "x", "PATH": "/usr/bin:/bin"},
        timeout=30,
    )
    assert env_bad.returncode == 2 and "DYNAQ_HTTP_PORT" in env_bad.stderr


def test_example_config_loads() -> None:
    from dynaq.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[2] / "config" / "dynaq.toml", env={})
    assert cfg.http.port == 8081 and cfg.storage.backend == "embedded"
    time.sleep(0)


def test_a_node_others_can_reach_refuses_to_start_without_tokens(tmp_path: Path) -> None:
    env = {
        "DYNAQ_HTTP_HOST": "0.0.0.0",
        "DYNAQ_HTTP_PORT": str(free_port()),
        "DYNAQ_DATA_DIR": str(tmp_path / "d"),
        "DYNAQ_STATS_TYPE": "none",
        "PATH": "/usr/bin:/bin",
    }
    out = subprocess.run(
        [sys.executable, "-m", "dynaq", "server"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert "bad configuration" in out.stderr and "no client tokens" in out.stderr
    assert "DYNAQ_AUTH_TOKENS" in out.stderr and "DYNAQ_AUTH_ALLOW_ANONYMOUS" in out.stderr


@pytest.mark.parametrize(
    ("extra_env", "args", "says"),
    [
        ({}, ["--workers", "-1"], "http.workers must be in 0..16"),
        ({"DYNAQ_STORAGE_BACKEND": "mysql"}, [], "unknown storage backend 'mysql'"),
        ({"DYNAQ_AUTH_TOKENS": "garbage"}, [], "auth.tokens[0]"),
    ],
)
def test_every_configuration_error_is_exit_2_before_anything_starts(
    tmp_path: Path, extra_env: dict[str, str], args: list[str], says: str
) -> None:
    """Wherever the mistake is (the file, a DYNAQ_* variable, a flag), the node says
    ``bad configuration`` and exits 2, as for any other setting, and leaves no data."""
    env = {
        "DYNAQ_HTTP_PORT": str(free_port()),
        "DYNAQ_DATA_DIR": str(tmp_path / "d"),
        "DYNAQ_STATS_TYPE": "none",
        "PATH": "/usr/bin:/bin",
        **extra_env,
    }
    out = subprocess.run(
        [sys.executable, "-m", "dynaq", "server", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("dynaq: bad configuration: ") and says in out.stderr
    assert not (tmp_path / "d").exists()


def test_tokens_from_the_environment_guard_a_real_node(tmp_path: Path) -> None:
    token = secrets.token_urlsafe(24)
    env = {
        "DYNAQ_HTTP_HOST": "0.0.0.0",
        "DYNAQ_AUTH_TOKENS": f"ops:{token}:admin=*,reader:{token}-r:read=queue/jobs-*",
        "DYNAQ_LOG_LEVEL": "debug",
    }
    p = node_process(tmp_path, "guarded", env=env)
    try:
        p.start()  # the harness waits on /health, which needs no token

        def get(path: str, tok: str | None = None) -> tuple[int, dict[str, str]]:
            req = urllib.request.Request(p.url + path)
            if tok is not None:
                req.add_header("Authorization", f"Bearer {tok}")
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return int(r.status), dict(r.headers)
            except urllib.error.HTTPError as exc:
                return exc.code, dict(exc.headers)

        status, headers = get("/v1/queues")
        assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
        assert get("/v1/queues", token)[0] == 200
        assert get("/v1/queues/other/messages/1", f"{token}-r")[0] == 403
        assert token not in p.log()  # secrets stay out of the log
    finally:
        p.kill()


def test_the_harness_runs_a_ring_that_requires_tokens(tmp_path: Path) -> None:
    token = secrets.token_urlsafe(24)
    env = {"DYNAQ_AUTH_TOKENS": f"hashed:{token_digest('x' * 20)}:read=*,ops:{token}:admin=*"}
    with LocalCluster(tmp_path, 2, env=env) as cluster:  # converges through a token
        assert cluster.token == token  # the first one given in the clear
        node = cluster.nodes[0]
        assert http_get(node.url + "/v1/status/servers")[0] == 401
        status, body = http_get(node.url + "/v1/status/servers", token=token)
        assert status == 200 and body.decode().count("Member:") == 2


@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
def test_the_node_runs_on_the_event_loop_its_config_names(tmp_path: Path, event_loop: str) -> None:
    """``http.event_loop``: uvloop by default, the standard library's on request;
    the node says which in its "node serving" line and serves either way."""
    env = {"DYNAQ_LOG_LEVEL": "info"}
    if event_loop == "asyncio":
        env["DYNAQ_HTTP_EVENT_LOOP"] = "asyncio"
    p = node_process(tmp_path, f"loop-{event_loop}", env=env)
    try:
        p.start()
        status, _ = http_get(f"{p.url}/v1/queues")
        assert status == 200
        serving = [line for line in p.log().splitlines() if "node serving" in line]
        assert serving and f'"event_loop": "{event_loop}"' in serving[0], p.log()
    finally:
        p.kill()
