"""The store fills up under load: writes get a clear 507, consumers drain, writes resume.

Two ways to fill it: a node with a tiny LMDB map (``embedded_map_size_mb=2``),
and a node whose data dir is a real 12 MiB tmpfs mounted by the test (root
only; it is unmounted afterwards). Producers fill the queue until the node
answers 507 ``insufficient_storage`` (JSON error body); while it is full a
receive and a delete still work; then the recorded workload runs, its
consumers draining the queue while its producers keep sending (refused at
first, accepted once there is room again), and the history checker judges
everything, the fill included.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from dynaq.testing import History, Workload, run_node, run_workload
from dynaq.testing.history import Delivery
from tests.faults.helpers import assert_verdict, missing, server_errors

QUEUE = "history"
VT_S = 3.0
PAD = "x" * 1000  # tokens are the bodies: long ones fill the store faster


async def _json(
    http: aiohttp.ClientSession, method: str, url: str, body: Any = None
) -> tuple[int, Any]:
    async with http.request(method, url, json=body) as r:
        return r.status, await r.json(content_type=None)


async def _fill(http: aiohttp.ClientSession, url: str, h: History) -> dict[str, Any]:
    """Send 20-message batches until the node answers 507; return that answer's body."""
    deadline = time.monotonic() + 90
    for b in range(20_000):
        assert time.monotonic() < deadline, "the store never filled up"
        sent = [h.sent(f"fill-{b}-{i}-{PAD}") for i in range(20)]
        items = [{"body": e.token} for e in sent]
        status, body = await _json(
            http, "POST", f"{url}/v2/queues/{QUEUE}/messages", items and {"messages": items}
        )
        h.responses[f"enqueue {status}"] += 1
        for i, e in enumerate(sent):
            e.completed = h.now()
            e.outcome = "ok" if status == 200 else "failed" if status in (507, 422) else "unknown"
            if status == 200:
                e.message_id = int(body["ids"][i])
        if status == 507:
            return dict(body)
        assert status == 200, (status, body)
    raise AssertionError("the store never filled up")


async def _receive_and_delete_while_full(http: aiohttp.ClientSession, url: str, h: History) -> None:
    """A consumer's receive and delete work on the full store (recorded as deliveries)."""
    invoked = h.now()
    status, body = await _json(
        http,
        "POST",
        f"{url}/v2/queues/{QUEUE}/messages/receive",
        {"max_messages": 50, "visibility_timeout_s": VT_S},
    )
    assert status == 200 and body["messages"], body
    got = [Delivery(m["body"], int(m["id"]), h.now(), invoked, VT_S) for m in body["messages"]]
    h.deliveries.extend(got)
    for d in got:
        d.delete_invoked = h.now()
    ids = [str(d.message_id) for d in got]
    status, body = await _json(
        http, "POST", f"{url}/v2/queues/{QUEUE}/messages/delete", {"ids": ids}
    )
    assert status == 200 and body["deleted"] == len(got), body
    for d in got:
        d.delete_outcome, d.delete_completed = "ok", h.now()


async def _fill_drain_refill(
    name: str, tmp_path: Path, env: Mapping[str, str], **settings: Any
) -> None:
    h = History()
    async with run_node(directory=tmp_path, env=env, **settings) as node:
        t0 = time.monotonic()
        async with aiohttp.ClientSession() as http:
            status, _ = await _json(http, "PUT", f"{node.url}/v1/queues/{QUEUE}")
            assert status == 201
            status, _ = await _json(
                http, "PATCH", f"{node.url}/v1/queues/{QUEUE}", {"visibility_timeout": VT_S}
            )
            assert status == 200
            refusal = await _fill(http, node.url, h)
            assert refusal["code"] == "insufficient_storage", refusal
            assert "drain" in refusal["error"], refusal
            filled = sum(e.outcome == "ok" for e in h.enqueues)
            # Still full: the same write is refused again, but receives and deletes work.
            status, _ = await _json(
                http,
                "POST",
                f"{node.url}/v2/queues/{QUEUE}/messages",
                {"messages": [{"body": f"refused-{i}-{PAD}"} for i in range(20)]},
            )
            assert status == 507
            await _receive_and_delete_while_full(http, node.url, h)
        before = dict(h.responses)
        workload = Workload(
            endpoints=[node.url],
            queue=QUEUE,
            messages=1_500,
            duration_s=20.0,
            visibility_timeout_s=VT_S,
            drain_max_s=60.0,
            create_queue=False,
            seed=5,
        )
        await run_workload(workload, history=h)
        wall = time.monotonic() - t0
        # Drained: a write that was refused when full is accepted again.
        async with aiohttp.ClientSession() as http:
            await _json(http, "PUT", f"{node.url}/v1/queues/after")
            status, _ = await _json(
                http,
                "POST",
                f"{node.url}/v2/queues/after/messages",
                {"messages": [{"body": PAD * 4}]},
            )
            assert status == 200
        log = await asyncio.to_thread(node.log)
    during = {k: n - before.get(k, 0) for k, n in h.responses.items()}
    assert during.get("enqueue 200", 0) > 0, during  # writes resumed while consumers drained
    assert server_errors(h, allowed=frozenset({507})) == {}, (h.responses, log[-3000:])
    assert not any(k.startswith(("delete 5", "receive 5")) for k in h.responses), h.responses
    await assert_verdict(name, h, wall, artifacts=tmp_path, filled_before_507=filled)


async def test_a_full_lmdb_map_answers_507_and_drains(tmp_path: Path) -> None:
    await _fill_drain_refill(
        "store full: 2 MiB LMDB map",
        tmp_path,
        {},
        embedded_map_size_mb=2,
        embedded_min_free_disk_mb=0,
    )


@contextlib.asynccontextmanager
async def _tmpfs(path: Path, size_mb: int) -> AsyncIterator[Path]:
    """A tmpfs of ``size_mb`` mounted at ``path`` for the block (root only)."""
    if os.geteuid() != 0:
        missing("mounting a small file system needs root")
    await asyncio.to_thread(path.mkdir)
    done = await asyncio.to_thread(
        subprocess.run,
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "dynaq-test", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        missing(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        await asyncio.to_thread(subprocess.run, ["umount", "-l", str(path)], check=False)


async def test_a_full_file_system_answers_507_and_drains(tmp_path: Path) -> None:
    async with _tmpfs(tmp_path / "fs", 12) as fs:
        await _fill_drain_refill(
            "store full: 12 MiB tmpfs",
            tmp_path,
            {"DYNAQ_DATA_DIR": str(fs / "data")},
            embedded_min_free_disk_mb=2,
        )


async def test_a_node_on_a_disk_with_no_room_at_all_says_so_in_one_line(tmp_path: Path) -> None:
    """A disk with no room even for the lock file's pid cannot hold a new store (LMDB
    would die of SIGBUS on it): the node refuses to start, in one line, exit 1."""
    async with _tmpfs(tmp_path / "fs", 1) as fs:

        def fill() -> None:
            with (fs / "filler").open("wb") as f, contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()

        await asyncio.to_thread(fill)
        env = {
            **os.environ,
            "DYNAQ_DATA_DIR": str(fs / "data"),
            "DYNAQ_HTTP_PORT": "0",
            "DYNAQ_STATS_TYPE": "none",
        }
        out = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "dynaq", "server"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
    assert out.returncode == 1, out.stderr
    assert out.stderr.strip().splitlines() == [
        f"dynaq: cannot start in data directory '{fs / 'data'}': No space left on device"
    ]
