"""A ring of 3 node processes on one Cassandra keyspace stopped gracefully at once
(``docker compose down``, a rollout that replaces every node): each node's leave
handover goes to peers that are leaving too, which refuse it (503), so each parks
what it holds in the store (a record per queue and node), and the first members
back take it before they serve."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from dynaq.client import AsyncClient, NewMessage, QueueSettings
from dynaq.client.types import ReceivedMessage
from dynaq.core.receipts import decode_receipt
from dynaq.testing.servers.cassandra import CassandraServer
from tests.fixtures.ring import cassandra_ring

NAMES = ["dynaq-1", "dynaq-2", "dynaq-3"]


# Not yet shown reliable, so under -m soak: about 1 run in 24 serves some of the 30 again
# at the restart, before and after the handoff fixes of tests/cluster/
# test_slice_handoff_refused.py (each an interleaving read in a failing run's logs). In the
# last one seen, lanes that moved twice within a few ms (two members joining one after the
# other) left some entries with no holder; how, not found yet.
@pytest.mark.soak
async def test_a_ring_stopped_at_once_keeps_in_flight_messages_for_the_restart(
    tmp_path: Path, cassandra: CassandraServer
) -> None:
    async with cassandra_ring(tmp_path, cassandra) as ring:
        urls = ring.urls
        async with AsyncClient(urls[0]) as c:
            await c.create_queue("w", QueueSettings(visibility_timeout_s=600))
        await ring.wait_converged(NAMES, timeout_s=30)
        ids: set[int] = set()
        taken: list[ReceivedMessage] = []
        for n, url in enumerate(urls):
            # A group each: a group's lane is its hash, so the 60 spread over all three
            # slices (a node's ungrouped sends share one random lane: 1 run in 9 put
            # all 60 in one slice, and one process served all 30).
            batch = [NewMessage(f"m{i}", group=f"g{n}-{i}") for i in range(20)]
            async with AsyncClient(url) as w:
                ids |= set(await w.enqueue("w", batch))
        for _ in range(30):  # bounded: 30 of the 60, served by the slices' owners
            for url in urls:
                if len(taken) < 30:
                    async with AsyncClient(url) as w:
                        taken += await w.receive("w", min(10, 30 - len(taken)), wait_time_s=1)
            if len(taken) >= 30:
                break
        assert len(taken) == 30
        holders = {decode_receipt(m.receipt)[1] >> 20 for m in taken}  # per process
        assert len(holders) >= 2, holders
        codes = await asyncio.gather(*(ring.stop(n, timeout_s=60) for n in NAMES))
        assert codes == [0, 0, 0]
        await asyncio.gather(*(ring.start(n, timeout_s=90) for n in NAMES))
        await ring.wait_converged(NAMES, timeout_s=30)
        rest = ids - {m.id for m in taken}
        got: set[int] = set()
        async with AsyncClient(urls[1]) as c:
            for _ in range(100):  # bounded: the rest comes back within seconds
                msgs = await c.receive("w", 10, wait_time_s=1)
                assert not {m.id for m in msgs} - rest  # none of the taken ones came back
                got |= {m.id for m in msgs}
                if msgs:
                    await c.delete("w", [m.id for m in msgs])
                if got == rest:
                    break
            assert got == rest
            assert await c.receive("w", 10, wait_time_s=2) == []
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{urls[2]}/v2/queues/w/messages/delete",
                json={"receipts": [m.receipt for m in taken]},
            ) as r,
        ):
            assert r.status == 200, await r.text()
            assert (await r.json()).get("refused", []) == []  # their receipts hold
        async with AsyncClient(urls[0]) as c:
            assert (await c.browse("w", 0, 100)).messages == []
