"""Deleting a tagged message acks its batch item before the delete (review item 7).

An acknowledged delete implies its item was acked: every store call the
item's ack makes during the delete is failed or cancelled once in turn (a
consumer retries a failed delete), and after each delete that succeeded the
deleted messages' items are clear; the batch then completes exactly once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from dynaq.clock import ManualClock
from dynaq.core import keys
from dynaq.core.batch_items import BATCH_ITEM_ATTRIBUTE, ItemRef, item_id, parse_item_id
from dynaq.core.messages import NewMessage
from dynaq.errors import DynaqError
from dynaq.node import Node
from dynaq.services.batches import EXACT
from dynaq.services.batches.records import Block
from dynaq.storage.base import prefix_end
from dynaq.storage.memory import MemoryStore
from tests.fixtures.nodes import node_config
from tests.services.batch_faults import Fault, FaultyStore, injection_points

ITEMS = 3


class Consumer:
    """A node on a faulty memory store with one tracked batch of tagged messages."""

    def __init__(self, tmp_path: Path) -> None:
        self.clock = ManualClock()
        self.store = FaultyStore(MemoryStore())
        self.node = Node(
            node_config(tmp_path, batches={"reap_interval_s": 0}),
            clock=self.clock,
            store=self.store,
        )
        self.batch = 0
        self.ids: list[int] = []
        self.items: dict[int, ItemRef] = {}

    async def start(self) -> None:
        n = self.node
        await n.start()
        await n.catalog.create_queue("work")
        self.batch = await n.batches.open(EXACT, "k")
        [(block, upto)] = await n.batches.add_items(self.batch, ITEMS)
        tags = [item_id(self.batch, block, i) for i in range(upto)]
        self.ids = await n.queues.enqueue(
            "work", [NewMessage(b"x", {BATCH_ITEM_ATTRIBUTE: t}) for t in tags]
        )
        self.items = dict(zip(self.ids, (parse_item_id(t) for t in tags), strict=True))
        await n.batches.close(self.batch, EXACT)
        self.store.calls.clear()

    async def delete_all(self) -> list[str]:
        """Delete each message (retrying a failed delete); return what broke the promise."""
        broken: list[str] = []
        for i in self.ids:
            for _ in range(5):
                try:
                    removed = await self.node.queues.delete("work", [i])
                except (DynaqError, asyncio.CancelledError):
                    continue
                if removed and not await self._acked(self.items[i]):
                    broken.append(f"message {i} deleted, its item not acked")
                break
            else:
                broken.append(f"message {i}: the delete kept failing")
        return broken

    async def _acked(self, ref: ItemRef) -> bool:
        item = await self.store.inner.get(keys.batch_block(ref.batch_id, ref.block.bytes))
        return item is not None and not Block.decode(item.value).bits >> ref.index & 1

    async def repair(self) -> None:
        for _ in range(3):
            self.clock.advance(200)
            for _ in range(20):
                await asyncio.sleep(0)
            await self.node.batches.reap_once()

    async def traces(self) -> int:
        n = 0
        for prefix in (keys.BATCH_REPAIR, keys.BATCH_COMPLETION):
            n += len(await self.store.inner.scan(prefix, prefix_end(prefix), 10))
        return n


async def test_every_window_of_a_delete_acks_its_item_and_completes_once(tmp_path: Path) -> None:
    clean = Consumer(tmp_path / "clean")
    await clean.start()
    try:
        assert await clean.delete_all() == []
        assert clean.store.flips[clean.batch] == 1
    finally:
        await clean.node.stop()
    points = injection_points(clean.store.calls)
    assert len(points) > 20
    failures: list[str] = []
    for k, fault in enumerate(points):
        c = Consumer(tmp_path / str(k))
        await c.start()
        try:
            c.store.fault = fault
            broken = await c.delete_all()
            c.store.fault = None
            await c.repair()
            h = await c.node.batches.get(c.batch)
            if not h.complete:
                broken.append(f"pending={h.pending}")
            if c.store.flips[c.batch] != 1:
                broken.append(f"flips={c.store.flips[c.batch]}")
            if await c.node.queues.peek("work", c.ids):
                broken.append("messages left")
            if await c.traces():
                broken.append("traces left")
            if broken:
                failures.append(f"{fault}: {'; '.join(broken)}")
        finally:
            await c.node.stop()
    assert failures == [], "\n".join(failures)


async def test_a_delete_whose_ack_fails_is_a_retriable_503_and_deletes_nothing(
    tmp_path: Path,
) -> None:
    c = Consumer(tmp_path)
    await c.start()
    try:
        async with aiohttp.ClientSession(base_url=f"http://127.0.0.1:{c.node.port}") as http:
            c.store.fault = Fault("put_if_version", 1, "fail")  # the item's bit clear
            r = await http.post("/v2/queues/work/messages/delete", json={"ids": [str(c.ids[0])]})
            assert r.status == 503, await r.text()
            assert (await r.json())["code"] == "storage_unavailable"
            assert len(await c.node.queues.peek("work", c.ids[:1])) == 1
            for i in c.ids:
                r = await http.post("/v2/queues/work/messages/delete", json={"ids": [str(i)]})
                assert r.status == 200 and (await r.json())["deleted"] == 1
            assert (await c.node.batches.get(c.batch)).complete
    finally:
        await c.node.stop()


async def test_a_message_whose_batch_is_gone_is_still_deleted(tmp_path: Path) -> None:
    c = Consumer(tmp_path)
    await c.start()
    try:
        await c.node.batches.delete(c.batch, EXACT)
        assert await c.node.queues.delete("work", c.ids) == c.ids
    finally:
        await c.node.stop()
