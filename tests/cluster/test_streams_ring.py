"""Streams on a ring: each stream is served by one node (its authority, recorded in the
store), and every node, and HAProxy in front of them, serves every stream by
forwarding to it -- declarations, appends, leases, live listens, deletes."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp

from dynaq.testing.cluster import HaproxyProcess, LocalCluster

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}, "note": {"type": "string"}},
    "required": ["n"],
}


async def _json(s: aiohttp.ClientSession, method: str, url: str, **kw: Any) -> tuple[int, Any]:
    async with s.request(method, url, **kw) as r:
        return r.status, await r.json(content_type=None)


async def _append(s: aiohttp.ClientSession, url: str, ns: list[int], **kw: Any) -> tuple[int, Any]:
    entries = [{"n": n} for n in ns]
    return await _json(
        s, "POST", f"{url}/v2/streams/events/entries", json={"entries": entries}, **kw
    )


async def _copies(s: aiohttp.ClientSession, url: str, stream: str, size: int) -> dict[str, int]:
    """The followers' sizes of ``stream`` once each reports ``size`` (or after 15 s)."""
    deadline = time.monotonic() + 15
    while True:
        _, listed = await _json(s, "GET", f"{url}/v2/streams")
        copies = next(e["copies"] for e in listed["streams"] if e["name"] == stream)
        if all(v == size for v in copies.values()) or time.monotonic() > deadline:
            return dict(copies)
        await asyncio.sleep(0.2)


async def _listen_until(s: aiohttp.ClientSession, url: str, count: int, appended: Any) -> list[int]:
    """Follow the stream live through ``url`` from index 0 until ``count`` entries came
    (``appended()`` runs once the replay is read: entries appended while following)."""
    got: list[int] = []
    async with s.get(f"{url}/v2/streams/events?i=0", timeout=aiohttp.ClientTimeout(total=30)) as r:
        assert r.status == 200 and r.headers["X-Subscription-Id"]
        fired = False
        async for line in r.content:
            meta, _, entry = line.decode().partition("\t")
            got.append(json.loads(entry)["n"])
            assert json.loads(meta)["index"] == len(got) - 1
            if len(got) == 3 and not fired:
                fired = True
                await appended()
            if len(got) >= count:
                break
    return got


async def test_every_node_serves_a_stream_that_lives_on_one(
    ring: tuple[LocalCluster, HaproxyProcess],
) -> None:
    cluster, lb = ring
    urls = cluster.urls
    async with aiohttp.ClientSession() as s:
        body = {"schema": SCHEMA, "order_key": "n"}
        status, out = await _json(s, "PUT", f"{lb.url}/v2/streams/events", json=body)
        assert status == 201 and out["created"] is True, out
        for u in urls:  # the same declaration through each node: the same stream
            status, out = await _json(s, "PUT", f"{u}/v2/streams/events", json=body)
            assert status == 200 and out["created"] is False, out

        listed = [await _json(s, "GET", f"{u}/v2/streams") for u in urls]
        owners = {tuple((e["name"], e["node"]) for e in out["streams"]) for _, out in listed}
        assert len(owners) == 1, listed  # every node lists it once, on the same node
        ((_, authority),) = owners.pop()
        others = [n for n in cluster.nodes if n.name != authority]

        for i, u in enumerate(urls):  # appends through every node land in one sequence
            status, out = await _append(s, u, [i])
            assert status == 200 and out == {"first_index": i, "count": 1}, out
        status, err = await _append(s, others[0].url, [0])
        assert status == 409 and err["code"] == "order_key_decreased", err  # the authority's rule
        # Both other nodes hold a copy (replicas = 3), and report it whole; with
        # acks = quorum every acknowledged append was on one of them already.
        assert await _copies(s, lb.url, "events", 3) == {n.name: 3 for n in others}

        async def more() -> None:
            assert (await _append(s, others[1].url, [3, 4]))[0] == 200

        # A live listen through a node that does not hold the stream follows it.
        assert await _listen_until(s, others[0].url, 5, more) == [0, 1, 2, 3, 4]
        async with s.head(f"{others[1].url}/v2/streams/events") as r:
            assert r.status == 200 and r.headers["X-Stream-Size"] == "5"

        # The publisher lease, taken through one node, fences appends through another.
        status, lease = await _json(s, "POST", f"{others[0].url}/v2/streams/events/publisher")
        assert status == 201, lease
        status, err = await _append(s, others[1].url, [5])
        assert status == 409 and err["code"] == "publisher_fenced", err
        token = {"X-Publisher-Token": str(lease["token"])}
        assert (await _append(s, others[1].url, [5], headers=token))[0] == 200
        release = f"{lb.url}/v2/streams/events/publisher"
        async with s.delete(release, headers=token) as r:
            assert r.status == 204

        # Its node killed: a clear, retriable 503 through the others; back with it, whole.
        node = cluster.node(authority)
        await asyncio.to_thread(node.kill)
        status, err = await _append(s, others[0].url, [6])
        assert status == 503 and err["code"] == "stream_unavailable", err
        assert authority in err["error"]
        # Reads of what is there are served by a copy: a prefix of the stream.
        async with s.get(f"{others[1].url}/v2/streams/events?nowait=true&format=array") as r:
            assert r.status == 200
            copied = [e["entry"]["n"] for e in await r.json(content_type=None)]
        assert len(copied) >= 3 and copied == list(range(len(copied))), copied
        await asyncio.to_thread(cluster.start_node, node, 60.0)
        deadline = time.monotonic() + 30
        while True:
            status, out = await _append(s, others[0].url, [6])
            if status == 200 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert status == 200 and out["first_index"] == 6, out

        # Just after the restart the nodes may still disagree on the stream's node for
        # a moment: a delete then gets the same clear, retriable 503, and is retried.
        deadline = time.monotonic() + 30
        while True:
            async with s.delete(f"{others[1].url}/v2/streams/events") as r:
                deleted = r.status
            if deleted != 503 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert deleted == 204, deleted
        for u in urls:
            status, err = await _json(s, "GET", f"{u}/v2/streams/events/schema")
            assert status == 404 and err["code"] == "stream_not_found", (u, err)


async def _authority_of(s: aiohttp.ClientSession, urls: list[str], stream: str) -> str:
    for u in urls:
        try:
            _, listed = await _json(s, "GET", f"{u}/v2/streams")
        except aiohttp.ClientError:
            continue
        for e in listed["streams"]:
            if e["name"] == stream:
                return str(e["node"])
    raise AssertionError(f"no node lists {stream}")


async def test_kill_9_of_the_authority_fails_over_to_a_copy_and_loses_no_acknowledged_entry(
    ring: tuple[LocalCluster, HaproxyProcess],
) -> None:
    """Four writers append (acks = quorum) through all three nodes in turn. The stream's
    node is killed -9 under that load: its most complete copy takes over under a new
    epoch, and appends go on through the others. The killed node comes back, cuts any
    tail it alone had, and catches up. Then the second authority is killed too, so the
    stream is served by one of the two others. Every acknowledged entry is at its
    acknowledged index at the end, densely numbered, and the outages answered only
    retriable 503s."""
    cluster, _ = ring
    urls = cluster.urls
    schema = {"type": "object", "properties": {"w": {"type": "integer"}}, "required": ["w"]}
    answers: dict[int, int] = {}
    acked: dict[int, tuple[int, int]] = {}  # index -> (writer, sequence)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s:
        status, out = await _json(s, "PUT", f"{urls[0]}/v2/streams/dur", json={"schema": schema})
        assert status == 201, out
        first = cluster.node(await _authority_of(s, urls, "dur"))
        stop_at = time.monotonic() + 14.0
        killed_at: list[float] = []
        resumed_after: list[float] = []

        async def writer(w: int) -> None:
            for k in range(3_000):  # bounded in count and in time
                if time.monotonic() > stop_at:
                    return
                batch = [{"w": w, "k": 10 * k + j} for j in range(10)]
                live = [n.url for n in cluster.nodes if n.alive()]
                url = f"{live[(w + k) % len(live)]}/v2/streams/dur/entries"
                try:
                    async with s.post(url, json={"entries": batch}) as r:
                        answers[r.status] = answers.get(r.status, 0) + 1
                        body = await r.json(content_type=None)
                except (aiohttp.ClientError, TimeoutError):
                    answers[0] = answers.get(0, 0) + 1  # the node asked died mid-request
                    await asyncio.sleep(0.1)
                    continue
                if r.status == 200:
                    if killed_at and not resumed_after:
                        resumed_after.append(time.monotonic() - killed_at[0])
                    for j in range(body["count"]):
                        acked[body["first_index"] + j] = (w, 10 * k + j)
                else:
                    await asyncio.sleep(0.1)

        async def fault() -> None:
            await asyncio.sleep(2.0)
            killed_at.append(time.monotonic())
            await asyncio.to_thread(first.kill)
            await asyncio.sleep(5.0)
            await asyncio.to_thread(cluster.start_node, first, 60.0)

        await asyncio.gather(fault(), *(writer(w) for w in range(4)))
        assert set(answers) <= {0, 200, 503}, answers  # never a 500
        assert resumed_after, "appends never resumed after the failover"
        second = await _authority_of(s, [n.url for n in cluster.nodes if n.alive()], "dur")
        assert second != first.name  # it failed over, and stayed there when the first came back
        sizes = await _copies(s, cluster.node(second).url, "dur", len(acked))
        # The second failover: its authority killed, the stream goes on from a copy.
        await asyncio.to_thread(cluster.node(second).kill)
        survivors = [n.url for n in cluster.nodes if n.alive()]
        deadline = time.monotonic() + 30
        while True:
            async with s.get(f"{survivors[0]}/v2/streams/dur?nowait=true&format=array") as r:
                if r.status == 200:
                    entries = await r.json(content_type=None)
                    break
            assert time.monotonic() < deadline, f"no failover after the second kill: {r.status}"
            await asyncio.sleep(0.5)
    assert [e["index"] for e in entries] == list(range(len(entries)))  # dense, in order
    got = {e["index"]: (e["entry"]["w"], e["entry"]["k"]) for e in entries}
    lost = {i: v for i, v in acked.items() if got.get(i) != v}
    figures = {
        "acked": len(acked),
        "stored": len(entries),
        "lost": len(lost),
        "answers": answers,
        "appends_resumed_after_s": round(resumed_after[0], 2),
        "copies_before_second_kill": sizes,
    }
    print(f"\nSTREAM-FAULT {json.dumps(figures)}")
    assert not lost, f"acknowledged entries lost or moved: {sorted(lost.items())[:10]}"


async def test_a_topics_history_is_one_stream_whichever_node_publishes(
    ring: tuple[LocalCluster, HaproxyProcess],
) -> None:
    """Publishes through all three nodes land in one history, stamped in order by its
    authority; a queue subscribed later gets it replayed through any node."""
    cluster, lb = ring
    urls = cluster.urls
    async with aiohttp.ClientSession() as s:
        assert (await _json(s, "PUT", f"{lb.url}/v1/topics/news"))[0] == 201
        status, topic = await _json(s, "PATCH", f"{urls[0]}/v2/topics/news", json={"history": True})
        assert status == 200 and topic["history_stream"] == "topic.news", topic
        for _ in range(40):  # the topic's setting reaches every node within a config sync
            answers = [await _json(s, "GET", f"{u}/v2/topics/news") for u in urls]
            if all(t["history"] for _, t in answers):
                break
            await asyncio.sleep(0.25)
        for round_ in range(3):
            for i, u in enumerate(urls):
                msg = {"body": f"{round_}-{i}", "attributes": {"node": str(i)}}
                status, out = await _json(
                    s, "POST", f"{u}/v2/topics/news/messages", json={"messages": [msg]}
                )
                assert status == 200, out
        async with s.get(f"{urls[1]}/v2/streams/topic.news?nowait=true&format=array") as r:
            kept = await r.json(content_type=None)
        assert len(kept) == 9
        orders = [e["order"] for e in kept]
        assert orders == sorted(orders)  # one authority stamps them: never decreasing
        assert (await _json(s, "PUT", f"{lb.url}/v1/queues/late"))[0] == 201
        await asyncio.sleep(1.5)  # the queue's config reaches every node
        for u in urls:  # replays through any node read the one history
            status, out = await _json(
                s, "POST", f"{u}/v2/topics/news/replay", json={"queue": "late", "max": 3}
            )
            assert status == 200 and out["read"] == 3 and out["next_index"] == 3, out
