"""``transact`` on both client flavours against a real node process with tokens:
consume-produce all or nothing, stale receipts raised with their names, retries safe."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from dynaq.client import (
    AsyncClient,
    Client,
    TxnDelete,
    TxnEnqueue,
    TxnOutput,
)
from dynaq.errors import Forbidden, StaleReceipts
from dynaq.testing.process import NodeProcess, node_process

ADMIN = "adm-0123456789abcdef"
LIMITED = "lim-0123456789abcdef"
TOKENS = f"ops:{ADMIN}:admin=*,worker:{LIMITED}:write=queue/src"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    p = node_process(tmp_path_factory.mktemp("client-txn"), env={"DYNAQ_AUTH_TOKENS": TOKENS})
    p.start()
    try:
        yield p
    finally:
        p.kill()


def _all_bodies(c: Client, queue: str) -> list[bytes]:
    return sorted(m.body for m in c.browse(queue, limit=1000).messages)


def test_the_blocking_client_processes_queue_to_queue_exactly_once(node: NodeProcess) -> None:
    with Client(node.url, token=ADMIN) as c:
        for q in ("src", "dst"):
            c.create_queue(q)
        c.enqueue("src", [b"1", b"2", b"3"])
        got = c.receive("src", 10, visibility_timeout_s=30)
        assert len(got) == 3 and all(m.receipt for m in got)
        outputs = [TxnEnqueue("dst", m.body * 2, dedup_id=f"{m.id}:{m.receive_count}") for m in got]
        result = c.transact([TxnDelete.of("src", m) for m in got], outputs)
        assert result.deleted == 3 and not result.replayed
        assert [o.queue for o in result.enqueued] == ["dst"] * 3
        assert not any(o.duplicate for o in result.enqueued)
        # the answer is "lost": the same call again is a replay, nothing stored twice
        again = c.transact([TxnDelete.of("src", m) for m in got], outputs)
        assert again.replayed and again.deleted == 0
        assert again.enqueued == [TxnOutput(o.queue, o.id, True) for o in result.enqueued]
        assert _all_bodies(c, "src") == []
        assert _all_bodies(c, "dst") == [b"11", b"22", b"33"]


async def test_the_asyncio_client_raises_stale_receipts_and_applies_nothing(
    node: NodeProcess,
) -> None:
    async with AsyncClient(node.url, token=ADMIN) as c:
        for q in ("a-src", "a-dst"):
            await c.create_queue(q)
        await c.enqueue("a-src", [b"x", b"y"])
        got = await c.receive("a-src", 10, visibility_timeout_s=30)
        x = next(m for m in got if m.body == b"x")
        await c.release("a-src", [x.id])
        [x2] = await c.receive("a-src", 1, visibility_timeout_s=30)
        assert x2.id == x.id and x2.receipt != x.receipt
        with pytest.raises(StaleReceipts) as raised:
            await c.transact(
                [TxnDelete.of("a-src", m) for m in got],
                [TxnEnqueue("a-dst", "out", dedup_id="h-1", delay_s=0)],
            )
        assert raised.value.receipts == [x.receipt] and raised.value.status == 409
        page = await c.browse("a-src")
        assert sorted(m.body for m in page.messages) == [b"x", b"y"]
        assert (await c.browse("a-dst")).messages == []
        # with the current receipts it commits
        y = next(m for m in got if m.body == b"y")
        result = await c.transact(
            [TxnDelete.of("a-src", x2), TxnDelete.of("a-src", y)],
            [TxnEnqueue("a-dst", "out", dedup_id="h-1", attributes={"from": "a-src"})],
        )
        assert result.deleted == 2
        [out] = await c.receive("a-dst", 1)
        assert out.body == b"out" and out.attributes == {"from": "a-src"}
        assert out.id == result.enqueued[0].id
        await asyncio.sleep(0)


def test_a_token_needs_write_on_every_queue_a_transaction_names(node: NodeProcess) -> None:
    with Client(node.url, token=ADMIN) as admin, Client(node.url, token=LIMITED) as worker:
        for q in ("src", "elsewhere"):
            if q not in admin.list_queues():
                admin.create_queue(q)
        with pytest.raises(Forbidden):
            worker.transact(enqueues=[TxnEnqueue("elsewhere", "x")])
        assert worker.transact(enqueues=[TxnEnqueue("src", "x")]).enqueued[0].queue == "src"
