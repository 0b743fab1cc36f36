"""Stream files against real node processes: finalizing, seeking, torn tails after
``kill -9``, acknowledged appends surviving it, and the signature check."""

from __future__ import annotations

import asyncio
import fcntl
import json
import re
import termios
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dynaq.testing.process import NodeProcess, node_process
from tests.streams.helpers import TRADES, append, declare, jsonl, read

_FINAL = re.compile(r"^(\d{20})-(\d{20})\.(\d{20})-(\d{20})\.seg$")

ONE_PROCESS = {"DYNAQ_HTTP_WORKERS": "1"}
"""These tests read and count one process's stream files under ``data.dir/streams``
(a node of several workers keeps a directory per worker): they run the node as one
process."""


def _files(node: NodeProcess, name: str) -> list[str]:
    return sorted(p.name for p in (node.data_dir / "streams" / name).glob("*.seg"))


def _finalized(node: NodeProcess, name: str) -> list[tuple[int, int, int, int]]:
    out = []
    for f in _files(node, name):
        m = _FINAL.match(f)
        if m:
            first, last, fo, lo = (int(g) for g in m.groups())
            out.append((first, last, fo, lo))
    return out


def _tear(node: NodeProcess, name: str) -> None:
    """Append half a record to the active file, as a crash mid-write leaves it."""
    active = next((node.data_dir / "streams" / name).glob("active-*.seg"))
    with active.open("ab") as f:
        f.write(b"\x40\x00\x00\x00garbage-of-a-half-written-record")


def _swap_schema(node: NodeProcess, name: str) -> None:
    """Replace the declared schema under the files (as another binary's would be)."""
    meta_path = node.data_dir / "streams" / name / "stream.json"
    meta = json.loads(meta_path.read_text())
    meta["schema"] = {"type": "object", "required": ["ts"]}
    meta["signature"] = "0" * 64
    meta["signatures"] = ["0" * 64]
    meta_path.write_text(json.dumps(meta))


async def _start(node: NodeProcess) -> None:
    await asyncio.to_thread(node.start)


async def test_segments_finalize_by_count_size_and_age_and_listeners_seek(
    tmp_path: Path,
) -> None:
    env = {
        "DYNAQ_STREAMS_SEGMENT_MAX_ENTRIES": "50",
        "DYNAQ_STREAMS_SEGMENT_MAX_BYTES": "8192",
        "DYNAQ_STREAMS_SEGMENT_MAX_AGE_S": "0.5",
        "DYNAQ_STREAMS_SPARSE_INDEX_EVERY": "7",
    }
    node = node_process(tmp_path, env={**env, **ONE_PROCESS})
    await _start(node)
    try:
        async with aiohttp.ClientSession() as http:
            url = node.url
            await declare(http, url, "count", TRADES)
            for k in range(4):
                await append(
                    http, url, "count", [{"ts": 100 * k + i, "price": 1} for i in range(60)]
                )
            finals = await asyncio.to_thread(_finalized, node, "count")
            # By count: 50 entries per file; names carry first/last index and order key.
            assert finals[:2] == [(0, 49, 0, 49), (50, 99, 50, 139)], finals
            assert all(last - first + 1 == 50 for first, last, _, _ in finals)
            # By size: 8 KiB files hold fewer entries when entries are large.
            await declare(http, url, "size", {"type": "object"}, None)
            await append(http, url, "size", [{"pad": "x" * 1000} for _ in range(30)])
            sized = await asyncio.to_thread(_finalized, node, "size")
            assert sized and all(last - first + 1 <= 8 for first, last, _, _ in sized), sized
            # By age: an append to a file older than 0.5 s finalizes it first.
            await declare(http, url, "age", TRADES)
            await append(http, url, "age", [{"ts": 1, "price": 1}])
            await asyncio.sleep(0.7)
            await append(http, url, "age", [{"ts": 2, "price": 1}])
            assert await asyncio.to_thread(_finalized, node, "age") == [(0, 0, 1, 1)]
            # Listeners seek into the middle of finalized files, by index and by order key.
            _, body, _ = await read(http, url, "count", nowait="true", i=123, n=3)
            assert [i for i, _, _ in jsonl(body)] == [123, 124, 125]
            _, body, _ = await read(http, url, "count", nowait="true", since=205, n=2)
            assert [(i, k) for i, k, _ in jsonl(body)] == [(125, 205), (126, 206)]
            _, body, _ = await read(http, url, "count", nowait="true")
            assert [i for i, _, _ in jsonl(body)] == list(range(240))
        # Everything is there again after a restart (finalized files known by name).
        await asyncio.to_thread(node.terminate)
        await _start(node)
        async with aiohttp.ClientSession() as http:
            _, body, _ = await read(http, node.url, "count", nowait="true", i=48, n=4)
            assert [i for i, _, _ in jsonl(body)] == [48, 49, 50, 51]
            assert (await append(http, node.url, "count", [{"ts": 999, "price": 1}]))[1] == {
                "first_index": 240,
                "count": 1,
            }
    finally:
        await asyncio.to_thread(node.kill)


@pytest.mark.slow
async def test_kill_9_loses_no_acknowledged_entry_and_a_torn_tail_is_cut(
    tmp_path: Path,
) -> None:
    node = node_process(tmp_path, env=ONE_PROCESS)
    await _start(node)
    acked: dict[int, int] = {}  # index -> ts of every acknowledged entry
    try:
        async with aiohttp.ClientSession() as http:
            await declare(http, node.url, "dur", TRADES, None)

            async def writer(w: int) -> None:
                for k in range(10_000):
                    batch = [{"ts": w * 1_000_000 + k * 10 + j, "price": w} for j in range(10)]
                    try:
                        status, body = await append(http, node.url, "dur", batch)
                    except (aiohttp.ClientError, ConnectionError):
                        return
                    if status != 200:
                        return
                    for j in range(body["count"]):
                        acked[body["first_index"] + j] = batch[j]["ts"]

            writers = [asyncio.create_task(writer(w)) for w in range(4)]
            await asyncio.sleep(1.5)
            await asyncio.to_thread(node.kill)  # SIGKILL under load
            await asyncio.gather(*writers)
        assert len(acked) > 100
        # The crash may have left half a record; make sure a torn tail is there to cut.
        await asyncio.to_thread(_tear, node, "dur")
        await _start(node)
        async with aiohttp.ClientSession() as http:
            _, body, _ = await read(http, node.url, "dur", nowait="true")
            entries = jsonl(body)
            assert [i for i, _, _ in entries] == list(range(len(entries)))  # dense, in order
            got = {i: e["ts"] for i, _, e in entries}
            assert all(got.get(i) == ts for i, ts in acked.items()), "an acknowledged entry lost"
            status, after = await append(http, node.url, "dur", [{"ts": 1, "price": 0}])
            assert status == 200 and after["first_index"] == len(entries)
        assert "stream torn tail truncated" in await asyncio.to_thread(node.log)
    finally:
        await asyncio.to_thread(node.kill)


async def test_a_stream_whose_files_carry_another_signature_refuses_to_open(
    tmp_path: Path,
) -> None:
    node = node_process(tmp_path, env=ONE_PROCESS)
    await _start(node)
    try:
        async with aiohttp.ClientSession() as http:
            await declare(http, node.url, "sig", TRADES)
            await declare(http, node.url, "ok", TRADES)
            await append(http, node.url, "sig", [{"ts": 1, "price": 1}])
        await asyncio.to_thread(node.terminate)
        # Someone swaps the declared schema under the files (as another binary would).
        await asyncio.to_thread(_swap_schema, node, "sig")
        await _start(node)
        async with aiohttp.ClientSession() as http:
            for method, path in (("GET", "/schema"), ("GET", "?nowait=true"), ("POST", "/entries")):
                async with http.request(
                    method, f"{node.url}/v2/streams/sig{path}", json={"entries": [{"ts": 2}]}
                ) as r:
                    assert r.status == 503, (method, path)
                    err = await r.json()
                    assert err["code"] == "stream_unavailable" and "refuses to open" in err["error"]
            async with http.get(f"{node.url}/v2/streams/ok/schema") as r:
                assert r.status == 200  # the others serve
        assert "stream refuses to open" in await asyncio.to_thread(node.log)
    finally:
        await asyncio.to_thread(node.kill)


async def test_retention_drops_the_oldest_files_and_listeners_start_at_what_is_kept(
    tmp_path: Path,
) -> None:
    env = {
        "DYNAQ_STREAMS_SEGMENT_MAX_ENTRIES": "10",
        "DYNAQ_STREAMS_RETENTION_MAX_BYTES": "3000",
    }
    node = node_process(tmp_path, env={**env, **ONE_PROCESS})
    await _start(node)
    try:
        async with aiohttp.ClientSession() as http:
            await declare(http, node.url, "kept", TRADES)
            for k in range(10):
                await append(
                    http, node.url, "kept", [{"ts": k * 10 + i, "price": 1} for i in range(10)]
                )
            finals = await asyncio.to_thread(_finalized, node, "kept")
            assert finals and finals[0][0] > 0, finals  # the oldest files are gone
            first_kept = finals[0][0]
            _, body, headers = await read(http, node.url, "kept", nowait="true")
            got = [i for i, _, _ in jsonl(body)]
            assert got == list(range(first_kept, 100)), got
            assert headers["X-Stream-Size"] == "100"  # indexes never restart
            # A read from an index retention removed starts at the first one kept, and
            # says so: a listener resuming from a stored offset can tell what it missed.
            _, body, headers = await read(http, node.url, "kept", nowait="true", i=0, n=1)
            assert [i for i, _, _ in jsonl(body)] == [first_kept]
            assert headers["X-Stream-First"] == str(first_kept)
            async with http.head(f"{node.url}/v2/streams/kept") as r:
                assert r.headers["X-Stream-First"] == str(first_kept)
        await asyncio.to_thread(node.terminate)
        await _start(node)  # reopens with the oldest files missing
        async with aiohttp.ClientSession() as http:
            status, body = await append(http, node.url, "kept", [{"ts": 999, "price": 1}])
            assert status == 200 and body["first_index"] == 100
    finally:
        await asyncio.to_thread(node.kill)


async def test_a_stream_declared_with_its_own_retention_keeps_the_newest_finalized_file(
    tmp_path: Path,
) -> None:
    """``retention`` in a declaration applies to that stream alone (the node keeps
    everything); a tiny limit still keeps the newest finalized file; re-declaring
    changes the limit, survives a restart, and bad limits are 422s."""
    node = node_process(tmp_path, env={"DYNAQ_STREAMS_SEGMENT_MAX_ENTRIES": "10", **ONE_PROCESS})
    await _start(node)
    try:
        async with aiohttp.ClientSession() as http:
            body: dict[str, Any] = {
                "schema": TRADES,
                "order_key": "ts",
                "retention": {"max_bytes": 1},
            }
            async with http.put(f"{node.url}/v2/streams/tiny", json=body) as r:
                assert r.status == 201 and (await r.json())["retention"] == {"max_bytes": 1}
            await declare(http, node.url, "all", TRADES)
            for k in range(6):
                batch = [{"ts": k * 10 + i, "price": 1} for i in range(10)]
                for name in ("tiny", "all"):
                    assert (await append(http, node.url, name, batch))[0] == 200
            tiny = await asyncio.to_thread(_finalized, node, "tiny")
            assert [f[0] for f in tiny] == [40], tiny  # only the newest finalized file
            assert len(await asyncio.to_thread(_finalized, node, "all")) == 5
            _, got, _ = await read(http, node.url, "tiny", nowait="true")
            assert [i for i, _, _ in jsonl(got)] == list(range(40, 60))
            # Re-declared without retention: the limit stays; with 0: no limit from now on.
            await declare(http, node.url, "tiny", TRADES)
            body["retention"] = {"max_bytes": 0, "max_age_s": 0}
            async with http.put(f"{node.url}/v2/streams/tiny", json=body) as r:
                assert r.status == 200
                assert (await r.json())["retention"] == {"max_bytes": 0, "max_age_s": 0.0}
            for bad in ({"max_bytes": -1}, {"max_bytes": True}, {"max_age_s": "1"}, {"x": 1}, 7):
                body["retention"] = bad
                async with http.put(f"{node.url}/v2/streams/tiny", json=body) as r:
                    err = await r.json()
                    assert r.status == 422 and "retention" in err["error"], err
        await asyncio.to_thread(node.terminate)
        await _start(node)
        async with aiohttp.ClientSession() as http:
            for k in range(6, 9):
                batch = [{"ts": k * 10 + i, "price": 1} for i in range(10)]
                assert (await append(http, node.url, "tiny", batch))[0] == 200
            assert [f[0] for f in await asyncio.to_thread(_finalized, node, "tiny")] == [
                40,
                50,
                60,
                70,
            ]
    finally:
        await asyncio.to_thread(node.kill)


async def _until_blocked(resp: aiohttp.ClientResponse, timeout_s: float = 20.0) -> None:
    """Wait until the node's listener for ``resp`` is blocked writing: the client's
    socket holds bytes it does not read, and no more arrive (on a loaded machine the
    listener may take seconds to fill the buffers; until then it would see the
    deletion between two writes and end at once)."""
    assert resp.connection is not None and resp.connection.transport is not None
    sock = resp.connection.transport.get_extra_info("socket")
    deadline = asyncio.get_running_loop().time() + timeout_s
    last = -1
    while asyncio.get_running_loop().time() < deadline:
        held = int.from_bytes(fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4), "little")
        if held > 0 and held == last:
            return
        last = held
        await asyncio.sleep(0.3)
    raise AssertionError(f"the listener never blocked ({last} bytes held)")


async def test_deletion_waits_for_a_listener_that_does_not_read(tmp_path: Path) -> None:
    # One process: through a node of workers the listen may be relayed by the other
    # worker, whose buffers (and the loopback socket between them) take the 8 MB, so
    # the serving worker's listener finishes writing and the delete need not wait.
    node = node_process(tmp_path, env={"DYNAQ_STREAMS_DELETE_WAIT_S": "3", **ONE_PROCESS})
    await _start(node)
    try:
        async with aiohttp.ClientSession() as http:
            await declare(http, node.url, "big", {"type": "object"}, None)
            for _ in range(8):  # ~8 MB: more than the sockets buffer
                await append(http, node.url, "big", [{"pad": "x" * 1000}] * 1000)
            stuck = await http.get(f"{node.url}/v2/streams/big")  # never read
            await _until_blocked(stuck)
            deleting = asyncio.create_task(http.delete(f"{node.url}/v2/streams/big"))
            await asyncio.sleep(0.5)
            async with http.get(f"{node.url}/v2/streams/big/schema") as r:
                assert r.status == 503 and (await r.json())["code"] == "stream_deleting"
            async with await deleting as d:  # after delete_wait_s at most
                assert d.status == 204
            stuck.close()
            async with http.get(f"{node.url}/v2/streams/big/schema") as r:
                assert r.status == 404
    finally:
        await asyncio.to_thread(node.kill)
