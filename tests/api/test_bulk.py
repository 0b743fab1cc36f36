"""The bulk-read routes the Spark data source uses: ring, partitions, snapshot pages."""

from __future__ import annotations

import base64
import struct

import aiohttp
import msgpack

from dynaq.node import Node


async def test_snapshot_pages_are_columnar_ordered_and_lock_nothing(
    node: Node, http: aiohttp.ClientSession
) -> None:
    assert (await http.put("/v1/queues/s")).status == 201
    msgs = [
        {"body": f"m{i}", "attributes": {"k": str(i)}} if i == 3 else {"body": f"m{i}"}
        for i in range(10)
    ]
    r = await http.post("/v2/queues/s/messages", json={"messages": msgs})
    ids = [int(i) for i in (await r.json())["ids"]]
    ring = await (await http.get("/v2/status/ring")).json()
    assert [m["name"] for m in ring["members"]] == ["test-node"]
    assert ring["members"][0]["from_id"] == "0"
    assert ring["members"][0]["to_id"] == str(2**63 - 1)  # decimal strings in JSON
    parts = await (await http.get("/v2/queues/s/partitions")).json()
    assert parts["node"] == "test-node" and len(parts["partitions"]) >= 1
    # A node of one process: it is its only worker.
    workers = await (await http.get("/v2/status/workers")).json()
    assert (workers["node"], workers["workers"]) == ("test-node", 1)
    assert [w["name"] for w in workers["live"]] == ["test-node"]
    headers = {"Accept": "application/msgpack"}
    got: list[int] = []
    bodies: list[bytes] = []
    start = 0
    while True:  # pages of 4: next_from_id walks the range
        r = await http.get(f"/v2/queues/s/snapshot?from_id={start}&limit=4", headers=headers)
        page = msgpack.unpackb(await r.read())
        n = page["count"]
        got += list(struct.unpack(f"<{n}q", page["ids"]))
        offs = struct.unpack(f"<{n + 1}i", page["body_offsets"])
        bodies += [page["bodies"][offs[i] : offs[i + 1]] for i in range(n)]
        if page["next_from_id"] is None:
            break
        start = page["next_from_id"]
    assert got == sorted(ids)
    assert bodies == [f"m{i}".encode() for i in range(10)]
    # JSON: the same buffers, base64-encoded; attributes per row when any row has them.
    r = await http.get("/v2/queues/s/snapshot")
    page = await r.json()
    assert page["count"] == 10 and page["next_from_id"] is None
    assert len(base64.b64decode(page["ids"])) == 80
    assert page["attributes"][3] == {"k": "3"} and page["attributes"][0] is None
    # A snapshot locked nothing: every message is still receivable.
    r = await http.post("/v2/queues/s/messages/receive", json={"max_messages": 100})
    assert len((await r.json())["messages"]) == 10


async def test_bulk_routes_reject_bad_input(node: Node, http: aiohttp.ClientSession) -> None:
    assert (await http.put("/v1/queues/s")).status == 201
    for path, status in [
        ("/v2/queues/nope/snapshot", 404),
        ("/v2/queues/nope/partitions", 404),
        ("/v2/queues/s/snapshot?limit=0", 422),
        ("/v2/queues/s/snapshot?limit=1000000", 422),
        ("/v2/queues/s/snapshot?from_id=-1", 422),
        ("/v2/queues/s/snapshot?from_id=x", 422),
        ("/v2/queues/s/snapshot?to_id=99999999999999999999", 422),
        ("/v2/queues/s/snapshot?from_id=10&to_id=5", 422),
    ]:
        r = await http.get(path)
        body = await r.json()
        assert r.status == status, (path, body)
        assert body["error"] and body["code"]


async def test_snapshot_pages_are_capped_in_bytes_and_resume_where_they_stopped(
    http: aiohttp.ClientSession, node: Node
) -> None:
    from dynaq.core.messages import NewMessage
    from dynaq.services import snapshots

    await node.catalog.create_queue("big")
    body = b"x" * (200 * 1024)
    for _ in range(3):
        await node.queues.enqueue("big", [NewMessage(body) for _ in range(50)])
    info = await node.catalog.queue("big")
    seen = 0
    from_id = 0
    pages = 0
    while True:
        page = await snapshots.read_page(node.store, info, from_id, 2**63 - 1, 50_000)
        assert len(page.bodies) <= snapshots.MAX_PAGE_BYTES + len(body)
        seen += page.count
        pages += 1
        if page.next_from_id is None:
            break
        from_id = page.next_from_id
    assert seen == 150 and pages >= 2
