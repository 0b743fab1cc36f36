"""A node of two worker processes (``http.workers = 2``): one port, one store, real processes.

Each test starts ``dynaq server`` with two workers and talks to it through its
one port (the kernel spreads connections over the workers), or through a
worker's private address where the test must choose the worker.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import aiohttp
import pytest

from dynaq.client import AsyncClient, NewMessage, QueueSettings
from dynaq.core.keyspace import slices
from dynaq.testing import run_node
from dynaq.testing.runners import NodeServer
from tests.cluster.workers import health_nodes, pids_of, wait_workers, worker_urls

pytestmark = pytest.mark.timeout(240)


async def _drain(c: AsyncClient, queue: str, want: int, within_s: float = 30.0) -> list[int]:
    """Receive and delete until ``want`` messages were seen; their ids in arrival order."""
    got: list[int] = []
    deadline = time.monotonic() + within_s
    while len(got) < want:
        assert time.monotonic() < deadline, f"drained {len(got)} of {want}"
        msgs = await c.receive(queue, 10, 30, wait_time_s=1)
        got.extend(m.id for m in msgs)
        if msgs:
            await c.delete(queue, [m.id for m in msgs])
    return got


async def test_two_workers_serve_one_port(tmp_path: Path) -> None:
    async with run_node(directory=tmp_path, http_workers=2) as node:
        await wait_workers(node, 2)
        # Both workers answer on the one port.
        assert await health_nodes(node.url, 40) == {"dynaq-1-w0", "dynaq-1-w1"}
        async with AsyncClient(node.url) as c:
            await c.create_queue("jobs")
            sent = set()
            for i in range(60):  # one request each: connections land on both workers
                sent.add(await c.send("jobs", f"m{i}"))
            got = await _drain(c, "jobs", 60)
            assert sorted(got) == sorted(sent)
            # Nothing is left: not visible, not in flight.
            assert await c.receive("jobs", 10, 30) == []


async def test_one_worker_per_core_answers_as_one_node(tmp_path: Path) -> None:
    """``http.workers = 0``: a lone node of the embedded store runs one worker per
    core it may use, and to clients it is one node: ``/health`` names the node (one
    member), ``/v1/status/partitionrange`` is the whole keyspace, and ``depth`` is
    exact whichever worker answers."""
    cores = min(len(os.sched_getaffinity(0)), 16)
    async with run_node(directory=tmp_path, http_workers=0) as node:
        if cores > 1:
            await wait_workers(node, cores)
        urls = await worker_urls(node)
        assert len(urls) == cores
        async with aiohttp.ClientSession() as http:
            for url in [node.url, *urls.values()]:
                async with http.get(f"{url}/health") as r:
                    body = await r.json()
                assert body["node"] == "dynaq-1" and body["members"] == 1, body
                if cores > 1:
                    assert body["worker"] in urls and body["workers"] == cores, body
                    assert body["workers_live"] == cores, body
                async with http.get(f"{url}/v1/status/partitionrange") as r:
                    assert await r.json() == {"bottom": "0", "top": str(2**63 - 1)}
        async with AsyncClient(node.url) as c:
            await c.create_queue("d")
            for url in urls.values():  # through every worker
                async with AsyncClient(url) as w:
                    await w.enqueue("d", [NewMessage(b"x") for _ in range(7)])
            for url in urls.values():
                async with AsyncClient(url) as w:
                    assert (await w.describe_queue("d")).depth == 7 * cores


async def test_a_receive_takes_what_every_worker_holds_within_its_byte_budget(
    tmp_path: Path,
) -> None:
    """A receive the answering worker's lanes fill only in part is topped up from
    the other worker's, as a lone node's would be; the receive's byte budget holds
    over both (``http.max_receive_bytes``: it stops once passed)."""
    async with run_node(directory=tmp_path, http_workers=2, http_max_receive_bytes=1000) as node:
        await wait_workers(node, 2)
        urls = await worker_urls(node)
        async with AsyncClient(node.url) as c:
            await c.create_queue("fill")
            # 40 groups: their lanes (a group's is its hash) fall to both workers.
            small = [NewMessage(f"s{i:02d}", group=f"g{i}") for i in range(40)]
            sent = set(await c.enqueue("fill", small))
            # Each worker's lanes: the ring of workers splits them as a ring of machines.
            lanes = slices(list(urls)).values()
            held = [sum(1 for i in sent if r.bottom_id <= i <= r.top_id) for r in lanes]
            assert len(held) == 2 and all(held), held  # both workers' lanes hold some
            async with AsyncClient(urls["dynaq-1-w1"]) as w:
                got = await w.receive("fill", 40, 30, wait_time_s=0)
                assert {m.id for m in got} == sent
            # 300-byte bodies: one receive passes the 1,000-byte budget once, over both.
            await c.create_queue("budget")
            big = [NewMessage(b"x" * 300, group=f"b{i}") for i in range(40)]
            await c.enqueue("budget", big)
            async with AsyncClient(urls["dynaq-1-w0"]) as w:
                got = await w.receive("budget", 40, 30, wait_time_s=0)
                sizes = [len(m.body) for m in got]
                assert sum(sizes) >= 1000 or len(got) == 40, sizes
                assert sum(sizes) - sizes[-1] < 1000 + 300, sizes


async def test_receive_without_wait_reaches_the_other_worker(tmp_path: Path) -> None:
    """A receive that does not wait, on a worker whose lanes are empty, still finds
    a message in the other worker's lanes: clients see one node."""
    async with run_node(directory=tmp_path, http_workers=2) as node:
        await wait_workers(node, 2)
        urls = await worker_urls(node)
        async with AsyncClient(urls["dynaq-1-w0"]) as a, AsyncClient(urls["dynaq-1-w1"]) as b:
            await a.create_queue("q")
            for _ in range(5):
                mid = await b.send("q", "x")
                # Whichever worker owns the lane, each serves it at once, no wait.
                got = await a.receive("q", 10, 30)
                assert [m.id for m in got] == [mid]
                await a.delete("q", [mid])


async def test_long_poll_on_one_worker_is_woken_by_an_enqueue_through_the_other(
    tmp_path: Path,
) -> None:
    async with run_node(directory=tmp_path, http_workers=2) as node:
        await wait_workers(node, 2)
        urls = await worker_urls(node)
        async with AsyncClient(urls["dynaq-1-w0"]) as a, AsyncClient(urls["dynaq-1-w1"]) as b:
            await a.create_queue("lp")
            waits: list[float] = []
            for i in range(6):
                poll = asyncio.create_task(a.receive("lp", 1, 30, wait_time_s=15))
                await asyncio.sleep(0.5)  # the poll is waiting
                assert not poll.done()
                t0 = time.monotonic()
                mid = await b.send("lp", f"wake{i}")
                got = await poll
                waits.append(time.monotonic() - t0)
                assert [m.id for m in got] == [mid]
                await a.delete("lp", [mid])
            print(f"\nlong poll woken after {[round(w, 3) for w in waits]} s")
            # Well under the 15 s wait, and under a watch round (2 s): a hint woke it.
            assert max(waits) < 1.9, waits


async def test_group_order_and_visibility_across_workers(tmp_path: Path) -> None:
    async with run_node(directory=tmp_path, http_workers=2) as node:
        await wait_workers(node, 2)
        urls = list((await worker_urls(node)).values())
        clients = [AsyncClient(u) for u in urls]
        port = AsyncClient(node.url)
        try:
            await port.create_queue("g", QueueSettings(visibility_timeout_s=3))
            sent: dict[str, list[int]] = {"a": [], "b": [], "c": []}
            for i in range(30):
                group = "abc"[i % 3]
                # Alternate the worker that takes each write of a group.
                (mid,) = await clients[i % 2].enqueue("g", [NewMessage(f"{i}", group=group)])
                sent[group].append(mid)
            seen: dict[str, list[int]] = {"a": [], "b": [], "c": []}
            for _ in range(200):
                if sum(map(len, seen.values())) == 30:
                    break
                msgs = await port.receive("g", 10, wait_time_s=1)
                groups = [m.group for m in msgs]
                # One in flight per group: never two of a group in one answer.
                assert len(groups) == len(set(groups)), groups
                for m in msgs:
                    assert m.group is not None
                    seen[m.group].append(m.id)
                # Not deleted yet: invisible until the timeout, from every worker.
                for c in clients:
                    again = await c.receive("g", 10)
                    assert not {m.id for m in again} & {m.id for m in msgs}
                    for m in again:  # another group's next message: put it back
                        assert m.group is not None
                        seen[m.group].append(m.id)
                    if again:
                        await c.delete("g", [m.id for m in again])
                if msgs:
                    await port.delete("g", [m.id for m in msgs])
            assert seen == sent
        finally:
            for c in [*clients, port]:
                await c.close()


async def _stop_node(node: NodeServer) -> int:
    return await node.stop(timeout_s=60)


async def test_sigterm_stops_every_worker_and_keeps_in_flight_messages_for_the_restart(
    tmp_path: Path,
) -> None:
    """A graceful stop of the whole node (SIGTERM to the supervisor) stops the workers
    in turn: each hands its in-flight messages to those still running and the last
    parks them in the store. After the restart they are still invisible (their
    consumers are still working on them), their receipts still delete them, their
    receive counts go on, and every other message is served."""
    async with run_node(directory=tmp_path, http_workers=2) as node:
        await wait_workers(node, 2)
        urls = await worker_urls(node)
        async with AsyncClient(node.url) as c:
            await c.create_queue("t", QueueSettings(visibility_timeout_s=600))
            ids: set[int] = set()
            for url in urls.values():  # each worker writes into its own lanes
                async with AsyncClient(url) as w:
                    ids |= set(await w.enqueue("t", [f"m{i}" for i in range(30)]))
            taken = []
            for url in urls.values():  # each serves its own lanes first: both hold some
                async with AsyncClient(url) as w:
                    taken += await w.receive("t", 10)
                    taken += await w.receive("t", 10)
            assert len(taken) == 40  # in flight for 10 minutes
        pids = await pids_of(node)
        assert await _stop_node(node) == 0
        for pid in pids:  # the workers exited too
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
        await node.start(timeout_s=60)
        await wait_workers(node, 2)
        async with AsyncClient(node.url) as c:
            rest = ids - {m.id for m in taken}
            got = await _drain(c, "t", len(rest))
            assert set(got) == rest  # none of the taken ones came back
            assert await c.receive("t", 10, wait_time_s=1) == []
        async with aiohttp.ClientSession() as http:
            receipts = [m.receipt for m in taken]
            async with http.post(
                f"{node.url}/v2/queues/t/messages/delete", json={"receipts": receipts}
            ) as r:
                assert r.status == 200, await r.text()
                assert (await r.json()).get("refused", []) == []  # the receipts still hold
        async with AsyncClient(node.url) as c:
            assert (await c.browse("t", 0, 100)).messages == []  # nothing stored


async def test_sigterm_of_one_worker_leaves_nothing_stuck_in_flight(tmp_path: Path) -> None:
    """A worker stopped alone (SIGTERM) hands its in-flight messages to the other
    and leaves; the supervisor starts it again and it rejoins. Every message
    comes back once its timeout ran out: nothing lost, nothing stuck in flight.
    (A message may come back before its deadline when the restarted worker
    takes its lanes back: in-flight state is not handed back on a join, as in
    any ring.)"""
    async with run_node(directory=tmp_path, http_workers=2) as node:
        await wait_workers(node, 2)
        urls = await worker_urls(node)
        async with AsyncClient(urls["dynaq-1-w0"]) as a, AsyncClient(urls["dynaq-1-w1"]) as b:
            await a.create_queue("h", QueueSettings(visibility_timeout_s=5))
            ids = set(await a.enqueue("h", [f"m{i}" for i in range(20)]))
            # Served through w1: its own lanes first, then w0's.
            taken = {m.id for m in await b.receive("h", 20, 5)}
            assert taken
            w1 = await _pid_of(urls, "dynaq-1-w1")
            t0 = time.monotonic()
            os.kill(w1, signal.SIGTERM)
            got = await _drain(a, "h", len(ids), within_s=40)
            assert set(got) == ids
            early = [i for i in got if i in taken][: len(taken)]
            print(f"\nall back {time.monotonic() - t0:.1f} s after SIGTERM ({len(early)} taken)")
        await wait_workers(node, 2)  # restarted by the supervisor
        assert w1 not in await pids_of(node)


async def _pid_of(urls: dict[str, str], name: str) -> int:
    """A worker's pid: the process listening on its private port (from /proc/net/tcp)."""
    port = int(urls[name].rsplit(":", 1)[1])
    return await asyncio.to_thread(_listener_pid, port)


def _listener_pid(port: int) -> int:
    inode = ""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        f = line.split()
        if int(f[1].split(":")[1], 16) == port and f[3] == "0A":
            inode = f[9]
    assert inode, f"nothing listens on {port}"
    for d in Path("/proc").iterdir():
        if not d.name.isdecimal():
            continue
        try:
            for fd in (d / "fd").iterdir():
                if os.readlink(fd) == f"socket:[{inode}]":
                    return int(d.name)
        except OSError:
            continue
    raise AssertionError(f"no process holds port {port}")


async def test_a_stream_is_served_through_either_worker(tmp_path: Path) -> None:
    """Streams keep working: one worker serves each stream (recorded in the store),
    the other forwards to it, whichever worker a request reaches."""
    schema = {
        "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        "order_key": "n",
    }
    async with run_node(directory=tmp_path, http_workers=2) as node:
        await wait_workers(node, 2)
        urls = list((await worker_urls(node)).values())
        async with aiohttp.ClientSession() as http:
            async with http.put(f"{node.url}/v2/streams/s", json=schema) as r:
                assert r.status == 201, await r.text()
            for i in range(10):  # alternate the worker that takes each append
                body = {"entries": [{"n": i}]}
                async with http.post(f"{urls[i % 2]}/v2/streams/s/entries", json=body) as r:
                    assert r.status == 200, await r.text()
                    assert (await r.json())["first_index"] == i
            for url in urls:
                async with http.get(f"{url}/v2/streams/s?nowait=true&format=array") as r:
                    assert [e["entry"]["n"] for e in await r.json()] == list(range(10))


async def test_a_long_poll_wakes_when_a_group_is_unblocked_through_either_worker(
    tmp_path: Path,
) -> None:
    """A long poll waiting on a group whose message is in flight gets the group's next
    message as soon as that one is deleted, whichever worker owns the group's lane,
    takes the poll and takes the delete (it woke up 1.5 s late when the owner's
    wake-up had already fired for nothing during the poll's round)."""
    async with run_node(directory=tmp_path, http_workers=2) as node:
        await wait_workers(node, 2)
        urls = list((await worker_urls(node)).values())
        async with AsyncClient(urls[0]) as a, AsyncClient(urls[1]) as b:
            await a.create_queue("f", QueueSettings(visibility_timeout_s=60))
            late = []
            for trial, (owner, poller, deleter) in enumerate(
                [(a, b, a), (a, b, b), (a, a, b), (b, a, b), (b, a, a), (b, b, a)] * 2
            ):
                g = f"g{trial}"
                await owner.enqueue("f", [NewMessage("1", group=g), NewMessage("2", group=g)])
                (first,) = await owner.receive("f", 1, wait_time_s=2)
                poll = asyncio.create_task(poller.receive("f", 1, wait_time_s=10))
                await asyncio.sleep(0.3)  # the poll is waiting
                t0 = time.monotonic()
                await deleter.delete("f", [first.id])
                got = await poll
                late.append(time.monotonic() - t0)
                assert [m.body for m in got] == [b"2"]
                await poller.delete("f", [got[0].id])
            assert max(late) < 1.0, [round(x, 3) for x in late]  # it was 1.5-1.7 s
