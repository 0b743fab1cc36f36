"""Dedup ids under racing writers on one node: enqueues, topic publishes and
transactions over several queues, with slow and failing store writes. Each id is
stored at most once per queue, and nothing waits forever (see
:mod:`dynaq.services.queues.dedup`)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from dynaq.core.messages import NewMessage
from dynaq.errors import StorageUnavailable
from dynaq.node import Node
from dynaq.services.queues.transactions import TxnEnqueue


@pytest.mark.parametrize("seed", range(12))
async def test_racing_writers_store_each_dedup_id_once_per_queue(node: Node, seed: int) -> None:
    rnd = random.Random(seed)
    for q in ("a", "b", "c"):
        await node.catalog.create_queue(q)
    await node.catalog.create_topic("t")
    for q in ("a", "b"):
        await node.catalog.subscribe("t", q)
    infos = {q: await node.catalog.queue(q) for q in ("a", "b", "c")}
    real_write = node.store.write_batch

    async def flaky_write(ops: Any) -> list[bool]:
        await asyncio.sleep(rnd.random() * 0.02)
        if rnd.random() < 0.15:
            raise StorageUnavailable("the store failed this write (nothing applied)")
        return await real_write(ops)

    node.store.write_batch = flaky_write  # type: ignore[method-assign]
    dedup_ids = [f"k{i}" for i in range(6)]

    async def writer() -> None:
        await asyncio.sleep(rnd.random() * 0.02)
        d = rnd.choice(dedup_ids)
        kind = rnd.random()
        message = NewMessage(d.encode(), dedup_id=d)
        try:
            if kind < 0.4:
                await node.queues.enqueue(rnd.choice("abc"), [message])
            elif kind < 0.7:
                await node.topics.publish("t", [message])
            else:
                outputs = [TxnEnqueue(infos[q], message) for q in rnd.sample("abc", 2)]
                await node.queues.transactions.run([], outputs)
        except StorageUnavailable:
            pass  # a failed write: its retry (another writer) may store it

    await asyncio.wait_for(asyncio.gather(*(writer() for _ in range(60))), 30)
    node.store.write_batch = real_write  # type: ignore[method-assign]
    for q in "abc":
        bodies = [m.body for m in await node.queues.receive(q, 100)]
        assert len(bodies) == len(set(bodies)), (q, sorted(bodies))
