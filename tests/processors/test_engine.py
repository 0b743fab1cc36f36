"""The exactly-once engine and the runner in this process, against a real node: the
stale in-flight append the conditional append exists for, fencing, ``status()``,
a graceful stop that finishes its step, and a second runner waiting for the lease."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from dynaq.client import AsyncClient, StreamInfo
from dynaq.errors import IndexTaken, StreamNotFound
from dynaq.processors import META, STATUS_KEYS, Graph, GraphRunner, Handles, delivery_hash, io
from dynaq.processors.exactly_once import ExactlyOnce
from dynaq.processors.io import Backing, Lease, LeaseLost, NotDurable, StreamInput
from dynaq.processors.records import attempt, snapshot, stamped
from dynaq.processors.steps import Reader, Stats
from dynaq.testing.process import NodeProcess


@pytest.fixture
async def client(node: NodeProcess) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(node.url) as c:
        yield c


def _double(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {"n": entry["n"], "double": 2 * entry["n"]}


async def _outputs(c: AsyncClient, stream: str) -> list[dict[str, Any]]:
    return [e["entry"] for e in await c.read_stream(stream, 0, 1000)]


async def _stale_worker(c: AsyncClient, t: str) -> tuple[dict[str, Any], str]:
    """Worker A: takes the lease, writes the snapshot and an attempt at index 0 of the
    output, sends nothing yet (its append is "in flight"), and lapses."""
    g = Graph(t)
    proc = g.transform("p", _double, f"{t}-in", f"{t}-out")
    await GraphRunner(g, c).declare()
    await c.append(f"{t}-in", [{"n": 1}])
    lease = Lease(c, proc.backing, 30)
    assert await lease.acquire(asyncio.Event())
    backing = Backing(c, proc.backing, lease)
    tailers = {f"{t}-in": 0}
    h = delivery_hash(proc.id, tailers)
    entry = stamped({"n": 1, "double": 2}, proc.id, h, 0)
    writes = [{"stream": f"{t}-out", "error": False, "entry": entry}]
    await backing.append(snapshot(proc.id, tailers))
    await backing.append(attempt(h, 0, writes, 0, {f"{t}-in": 1}))
    await lease.release()
    return entry, proc.id


async def _worker_b(c: AsyncClient, t: str) -> ExactlyOnce:
    g = Graph(t)
    proc = g.transform("p", _double, f"{t}-in", f"{t}-out")
    lease = Lease(c, proc.backing, 30)
    assert await lease.acquire(asyncio.Event())
    reader = Reader(proc, {f"{t}-in": StreamInput(c, f"{t}-in")})
    return ExactlyOnce(proc, c, Backing(c, proc.backing, lease), reader, Stats(), asyncio.Event())


async def test_stale_append_landing_first_is_found_not_repeated(client: AsyncClient) -> None:
    entry, _ = await _stale_worker(client, "stale1")
    await client.append("stale1-out", [entry], expect_index=0)  # A's append lands late
    b = await _worker_b(client, "stale1")
    await b.recover()
    assert b.tailers == {"stale1-in": 1} and b.stats.attempts == 0
    assert len(await _outputs(client, "stale1-out")) == 1


async def test_recovery_takes_the_unsettled_index_so_the_stale_append_cannot_land(
    client: AsyncClient,
) -> None:
    entry, _ = await _stale_worker(client, "stale2")
    b = await _worker_b(client, "stale2")
    await b.recover()  # size 0 == the recorded index: unsettled; B appends exactly there
    assert b.stats.attempts == 0 and b.tailers == {"stale2-in": 1}
    with pytest.raises(IndexTaken):
        await client.append("stale2-out", [entry], expect_index=0)  # A's, too late
    assert len(await _outputs(client, "stale2-out")) == 1


async def test_recorded_index_taken_by_another_writer_moves_the_attempt(
    client: AsyncClient,
) -> None:
    entry, proc_id = await _stale_worker(client, "stale3")
    await client.append("stale3-out", [{"foreign": 1}])  # someone else took index 0
    b = await _worker_b(client, "stale3")
    await b.recover()
    assert b.stats.attempts == 1  # a new attempt record, for index 1
    with pytest.raises(IndexTaken):
        await client.append("stale3-out", [entry], expect_index=0)
    out = await _outputs(client, "stale3-out")
    assert [e.get(META, {}).get("proc") for e in out] == [None, proc_id]
    records = [e["entry"] for e in await client.read_stream("_cues.stale3.p", 0, 100)]
    assert [(r["t"], r.get("index")) for r in records] == [
        ("snapshot", None),
        ("attempt-output", 0),
        ("attempt-output", 1),
    ]


class _RingView(AsyncClient):
    """A client of a node alone whose listing shows the copies a ring would: two
    followers, one reporting ``confirmed[stream]`` entries (all by default), the other
    none; so what a quorum holds is exactly ``confirmed``."""

    confirmed: dict[str, int]

    async def list_streams(self, *, hidden: bool = False) -> list[StreamInfo]:
        return [
            dataclasses.replace(i, copies={"f1": self.confirmed.get(i.name, i.size), "f2": 0})
            for i in await super().list_streams(hidden=hidden)
        ]


async def test_recovery_trusts_only_what_a_quorum_of_the_copies_holds(
    node: NodeProcess, client: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a ring an authority serves entries its followers have not confirmed yet (an
    append that answered 503 ``replication_timeout``); a failover may cut them away.
    Recovery neither reads such a backing tail nor counts such an output as landed: it
    is interrupted (:class:`NotDurable`) until the copies confirm them."""
    monkeypatch.setattr(io, "DURABLE_WAIT_S", 0.3)
    entry, _ = await _stale_worker(client, "quorum1")
    await client.append("quorum1-out", [entry], expect_index=0)  # landed, not confirmed
    ring = _RingView(node.url)
    async with ring:
        ring.confirmed = {"_cues.quorum1.p": 0, "quorum1-out": 0}
        b = await _worker_b(ring, "quorum1")
        with pytest.raises(NotDurable, match=r"_cues\.quorum1\.p"):  # the attempt record
            await b.recover()
        ring.confirmed["_cues.quorum1.p"] = 2
        with pytest.raises(NotDurable, match="quorum1-out"):  # the output at index 0
            await b.recover()
        assert b.tailers == {"quorum1-in": 0} and b.stats.delivered == 0
        ring.confirmed["quorum1-out"] = 1
        await b.recover()
        assert b.tailers == {"quorum1-in": 1} and b.stats.attempts == 0
    assert len(await _outputs(client, "quorum1-out")) == 1


async def test_an_input_entry_is_taken_once_a_quorum_of_the_copies_holds_it(
    node: NodeProcess, client: AsyncClient
) -> None:
    """An input entry its authority serves but its followers have not confirmed may be
    cut at failover (another entry then takes its index): a step waits for it."""
    await client.declare_stream("quorum2-in", {"type": "object"})
    await client.append("quorum2-in", [{"n": 1}, {"n": 2}])
    ring = _RingView(node.url)
    async with ring:
        ring.confirmed = {"quorum2-in": 1}
        inp = StreamInput(ring, "quorum2-in")
        assert await inp.entry_at(0) == (True, {"n": 1})
        assert await inp.entry_at(1) == (False, None)  # there, not confirmed yet
        ring.confirmed["quorum2-in"] = 2
        assert await inp.entry_at(1) == (True, {"n": 2})
        assert not inp.alone
    # A node of one process alone: what it serves is final. A node of several workers
    # lists each stream with no copies (the workers share its disk): the serving
    # worker's fsync'd size alone confirms it.
    alone = StreamInput(client, "quorum2-in")
    assert await alone.entry_at(1) == (True, {"n": 2})
    workers = (await client.health()).workers
    assert (alone.alone, alone.confirmed) == ((True, 0) if workers == 1 else (False, 2))


async def test_a_fenced_worker_writes_nothing_to_the_backing_stream(client: AsyncClient) -> None:
    g = Graph("fence")
    proc = g.transform("p", _double, "fence-in", "fence-out")
    await GraphRunner(g, client).declare()
    a = Lease(client, proc.backing, 0.2)
    assert await a.acquire(asyncio.Event())
    await asyncio.sleep(0.3)  # A's lease lapses (no renewal) ...
    b = Lease(client, proc.backing, 30)
    assert await b.acquire(asyncio.Event())  # ... and B takes it
    with pytest.raises(LeaseLost):
        await Backing(client, proc.backing, a).append(snapshot(proc.id, {"fence-in": 0}))
    assert a.lost.is_set()
    await a.keep()  # a renewal finds the lease taken: lost, and the keeper ends
    assert await client.stream_size(proc.backing) == 0
    await b.release()


async def test_status_and_a_graceful_stop_that_finishes_the_step(client: AsyncClient) -> None:
    entered = asyncio.Event()

    async def slow(entry: Mapping[str, Any]) -> dict[str, Any]:
        if entry["n"] == 3:
            entered.set()
            await asyncio.sleep(0.5)
        if entry["n"] == 2:
            raise ValueError("two")
        return _double(entry)

    g = Graph("graceful")
    g.transform("p", slow, "gr-in", "gr-out", error="gr-err")
    runner = GraphRunner(g, client, lease_ttl_s=2)
    await runner.start()
    await client.append("gr-in", [{"n": n} for n in range(1, 6)])
    await asyncio.wait_for(entered.wait(), 10)
    await runner.stop()  # n=3 is mid-step: it is delivered before the runner stops
    out = await _outputs(client, "gr-out")
    assert [e["n"] for e in out] == [1, 3]
    assert [e["inputs"]["gr-in"]["n"] for e in await _outputs(client, "gr-err")] == [2]
    (st,) = runner.status()
    assert tuple(st) == STATUS_KEYS
    assert st["name"] == "p" and st["kind"] == "transform" and st["strategy"] == "exactly_once"
    assert st["state"] == "stopped" and st["inputs"] == {"gr-in": 3}
    assert (st["delivered"], st["handled_errors"], st["attempts"]) == (3, 1, 3)
    assert st["last_delivery"] is not None and st["backing"] == "_cues.graceful.p"
    # A new runner resumes after the last delivered step: nothing twice, nothing lost.
    again = GraphRunner(g, client, lease_ttl_s=2)
    await again.start()
    for _ in range(200):
        if len(await _outputs(client, "gr-out")) == 4:
            break
        await asyncio.sleep(0.05)
    await again.stop()
    assert [e["n"] for e in await _outputs(client, "gr-out")] == [1, 3, 4, 5]


async def test_a_second_runner_waits_for_the_lease(client: AsyncClient) -> None:
    g = Graph("second")
    g.transform("p", _double, "sec-in", "sec-out")
    first, second = GraphRunner(g, client, lease_ttl_s=1), GraphRunner(g, client, lease_ttl_s=1)
    await first.start()
    await second.start()
    await client.append("sec-in", [{"n": n} for n in range(10)])
    for _ in range(100):
        if len(await _outputs(client, "sec-out")) == 10:
            break
        await asyncio.sleep(0.05)
    assert second.status()[0]["state"] == "waiting_for_lease"
    assert first.status()[0]["delivered"] == 10
    await first.stop()  # releases the lease: the second takes over
    await client.append("sec-in", [{"n": n} for n in range(10, 15)])
    for _ in range(200):
        if len(await _outputs(client, "sec-out")) == 15:
            break
        await asyncio.sleep(0.05)
    await second.stop()
    assert [e["n"] for e in await _outputs(client, "sec-out")] == list(range(15))
    assert second.status()[0]["delivered"] == 5


async def _until(cond: Any, what: str) -> None:
    for _ in range(300):
        if await cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_source_join_fork_and_filters(client: AsyncClient) -> None:
    """The kinds the crash runs do not cover: a source (a step counter as its input),
    a join_fork, and an alts whose filter skips entries of other types."""

    def count(step: int, delivery_hash: str) -> dict[str, Any] | None:
        return {"n": step, "hash": delivery_hash} if step < 5 else None

    def both(entries: Mapping[str, Any]) -> dict[str, Any]:
        a, b = entries["jf-a"]["n"], entries["jf-b"]["n"]
        return {"jf-sum": {"sum": a + b}, "jf-diff": {"diff": a - b} if a > b else None}

    def tag(entries: Mapping[str, Any]) -> dict[str, Any]:
        ((src, e),) = entries.items()
        return {"src": src, "id": e["id"]}

    g = Graph("kinds")
    g.source("count", count, "src-out")
    g.join_fork("jf", both, ["jf-a", "jf-b"], ["jf-sum", "jf-diff"])
    g.alts("orders", tag, ["al-a", "al-b"], "al-out", accepts=["order"])
    runner = GraphRunner(g, client)
    await runner.start()
    await client.append("jf-a", [{"n": n} for n in (5, 1, 7)])
    await client.append("jf-b", [{"n": n} for n in (2, 3, 7)])
    await client.append("al-a", [{"type": "order", "id": 1}, {"type": "refund", "id": 2}])
    await client.append("al-b", [{"id": 3}, {"type": "order", "id": 4}])

    async def all_there() -> bool:
        sizes = [await client.stream_size(s) for s in ("src-out", "jf-sum", "al-out")]
        return sizes == [5, 3, 2]

    await _until(all_there, "every kind's outputs")
    await asyncio.sleep(0.5)  # the source keeps stepping (nothing to emit): no more outputs
    await runner.stop()
    src = await _outputs(client, "src-out")
    assert [e["n"] for e in src] == [0, 1, 2, 3, 4]
    assert all(e["hash"] == e[META]["hash"] for e in src)
    assert [e["sum"] for e in await _outputs(client, "jf-sum")] == [7, 4, 14]
    diff = await _outputs(client, "jf-diff")
    assert [e["diff"] for e in diff] == [3]  # one step wrote both slots, the others one
    assert diff[0][META]["hash"] == (await _outputs(client, "jf-sum"))[0][META]["hash"]
    assert sorted(e["id"] for e in await _outputs(client, "al-out")) == [1, 4]
    status = {s["name"]: s for s in runner.status()}
    # A tailer passes skipped entries when it takes the next accepted one: al-b's
    # untyped entry is behind it; al-a's refund waits for an order after it.
    assert status["orders"]["inputs"] == {"al-a": 1, "al-b": 2}
    assert status["count"]["kind"] == "source" and status["jf"]["delivered"] == 3


async def test_a_lapsed_lease_stops_the_steps_until_recovered(
    client: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker whose lease lapsed (its renewals stopped: a long GC pause, a partition)
    writes nothing more, waits while another holds the lease, then re-takes it and
    recovers before stepping again."""

    async def never_renew(self: Lease) -> None:
        await asyncio.Event().wait()

    g = Graph("lapse")
    g.transform("p", _double, "la-in", "la-out")
    monkeypatch.setattr(Lease, "keep", never_renew)
    runner = GraphRunner(g, client, lease_ttl_s=0.5)
    await runner.start()
    await client.append("la-in", [{"n": n} for n in range(5)])

    async def outputs(k: int) -> bool:
        return await client.stream_size("la-out") == k

    await _until(lambda: outputs(5), "the first outputs")
    await asyncio.sleep(0.7)  # the lease lapses
    other = await client.acquire_publisher("_cues.lapse.p", ttl_s=30)  # another worker
    await client.append("la-in", [{"n": n} for n in range(5, 10)])

    async def fenced() -> bool:
        st = runner.status()[0]
        return st["state"] == "waiting_for_lease" and "lease" in (st["last_error"] or "")

    await _until(fenced, "the runner to find itself fenced")
    await asyncio.sleep(0.3)
    assert await client.stream_size("la-out") == 5  # nothing delivered while fenced
    monkeypatch.undo()  # renewals work again from the next lease on
    await client.release_publisher("_cues.lapse.p", other.token)
    await _until(lambda: outputs(10), "the rest, after recovery")
    await runner.stop()
    assert [e["n"] for e in await _outputs(client, "la-out")] == list(range(10))
    log = [e["entry"]["t"] for e in await client.read_stream("_cues.lapse.p", 0, 100)]
    assert log.count("snapshot") == 10  # the fenced snapshot append was refused


async def test_an_imperative_function_cannot_swallow_an_interruption(client: AsyncClient) -> None:
    """A read interrupted by the runner stopping raises into the user's code; a function
    that catches everything still does not get its step delivered (nor as an error)."""
    caught = asyncio.Event()

    async def greedy(h: Handles) -> None:
        try:
            await h.read("sw-in")
        except Exception:  # noqa: BLE001 - the careless user code this test is about
            caught.set()
            h.write("sw-out", {"caught": True})

    g = Graph("swallow")
    g.imperative("p", greedy, ["sw-in"], ["sw-out"], error="sw-err")
    runner = GraphRunner(g, client)
    await runner.start()
    await _until(lambda: _has_backing(client, "_cues.swallow.p"), "the snapshot")
    await runner.stop()
    assert caught.is_set()
    assert await client.stream_size("sw-out") == 0 and await client.stream_size("sw-err") == 0
    assert runner.status()[0]["handled_errors"] == 0


async def _has_backing(client: AsyncClient, name: str) -> bool:
    try:
        return await client.stream_size(name) > 0
    except StreamNotFound:
        return False
