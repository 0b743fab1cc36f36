"""Both client flavours over the whole API against a real node process, with a token."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator

import pytest

from dynaq.client import AsyncClient, Client, NewMessage, QueueSettings, ops
from dynaq.errors import (
    AlreadyExists,
    Forbidden,
    InvalidInput,
    QueueNotFound,
    TopicNotFound,
    Unauthorized,
    UnexpectedResponse,
)
from dynaq.testing.process import NodeProcess, node_process

ADMIN = "adm-0123456789abcdef"
READER = "rdr-0123456789abcdef"
TOKENS = f"ops:{ADMIN}:admin=*,reader:{READER}:read=*"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """One secured node process for the module (each test uses its own queues)."""
    p = node_process(tmp_path_factory.mktemp("client-api"), env={"DYNAQ_AUTH_TOKENS": TOKENS})
    p.start()
    try:
        yield p
    finally:
        p.kill()


def test_both_flavours_have_the_same_surface() -> None:
    def public(cls: type) -> dict[str, inspect.Signature]:
        # Over the class and its mixins (the stream methods live in one).
        members = {k: v for c in reversed(cls.__mro__[:-1]) for k, v in vars(c).items()}
        return {
            name: inspect.signature(fn)
            for name, fn in members.items()
            if callable(fn) and not name.startswith("_") and name not in {"from_env"}
        }

    sync, aio = public(Client), public(AsyncClient)
    assert set(aio) - set(sync) == {"consume", "producer"}
    assert set(sync) - set(aio) == set()
    for name, sig in sync.items():
        if name in {"close"}:
            continue
        if name == "follow":  # a generator in both flavours
            assert sig.return_annotation == "Generator[StreamEntry, None, None]"
            assert aio[name].return_annotation == "AsyncGenerator[StreamEntry, None]"
            assert [str(p) for p in sig.parameters.values()] == [
                str(p) for p in aio[name].parameters.values()
            ]
            continue
        assert inspect.iscoroutinefunction(getattr(AsyncClient, name)), name
        # Same parameters; return annotations name the same types.
        assert [str(p) for p in sig.parameters.values()] == [
            str(p) for p in aio[name].parameters.values()
        ], name
        assert sig.return_annotation == aio[name].return_annotation, name


async def test_queues_messages_and_topics(node: NodeProcess) -> None:
    async with AsyncClient(node.url, token=ADMIN) as c:
        await c.create_queue("jobs", QueueSettings(visibility_timeout_s=5, max_partitions=4))
        with pytest.raises(AlreadyExists):
            await c.create_queue("jobs")
        info = await c.describe_queue("jobs")
        assert (info.name, info.settings.visibility_timeout_s, info.settings.max_partitions) == (
            "jobs",
            5,
            4,
        )
        await c.configure_queue("jobs", QueueSettings(compressed_messages=True))
        assert (await c.describe_queue("jobs")).settings.compressed_messages is True
        assert "jobs" in await c.list_queues()

        one = await c.send("jobs", "hello", attributes={"k": "v"}, group=None)
        ids = await c.enqueue("jobs", [b"\xff\x00", NewMessage("third", dedup_id="d-1")])
        again = await c.enqueue("jobs", [NewMessage("third", dedup_id="d-1")])
        assert again == [ids[1]]  # deduplicated: the first message's id
        assert len({one, *ids}) == 3

        page = await c.browse("jobs", limit=10)
        assert [m.id for m in page.messages] == sorted([one, *ids])
        assert {m.body for m in page.messages} == {b"hello", b"\xff\x00", b"third"}
        assert page.next_from_id is None
        peeked = await c.peek("jobs", [ids[0], one])
        assert {m.id: m.body for m in peeked} == {ids[0]: b"\xff\x00", one: b"hello"}
        assert (await c.describe_queue("jobs")).depth == 3

        got = await c.receive("jobs", 10, visibility_timeout_s=30, wait_time_s=1)
        assert {m.body for m in got} == {b"hello", b"\xff\x00", b"third"}
        assert all(m.receive_count == 1 and m.addr == f"127.0.0.1:{node.port}" for m in got)
        assert next(m for m in got if m.id == one).attributes == {"k": "v"}
        assert (await c.describe_queue("jobs")).in_flight == 3
        assert await c.change_visibility("jobs", [one], 0) == [one]  # released
        again_got = await c.receive("jobs", 10, wait_time_s=1)
        assert [(m.id, m.receive_count) for m in again_got] == [(one, 2)]
        assert await c.delete("jobs", [m.id for m in got]) == 3
        assert await c.receive("jobs", 10) == []

        await c.create_topic("events")
        await c.create_queue("audit")
        assert await c.subscribe("events", "jobs") == ["jobs"]
        assert sorted(await c.subscribe("events", "audit")) == ["audit", "jobs"]
        published = await c.publish("events", ["e1", "e2"])
        assert sorted(published) == ["audit", "jobs"] and all(
            len(v) == 2 for v in published.values()
        )
        # Options: a body filter on "audit" (the subscription's options are replaced).
        await c.subscribe(
            "events", "audit", filter_policy={"level": ["error"]}, filter_scope="body"
        )
        published = await c.publish("events", ['{"level": "error"}', '{"level": "info"}'])
        assert {q: len(ids) for q, ids in published.items()} == {"jobs": 2, "audit": 1}
        with pytest.raises(InvalidInput):
            await c.subscribe("events", "audit", filter_policy={"level": "error"})
        assert await c.unsubscribe("events", "audit") == ["jobs"]
        assert await c.topic_queues("events") == ["jobs"]
        assert "events" in await c.list_topics()
        await c.delete_topic("events")
        with pytest.raises(TopicNotFound):
            await c.topic_queues("events")
        await c.delete_queue("audit")
        with pytest.raises(QueueNotFound) as err:
            await c.describe_queue("audit")
        assert err.value.status == 404 and err.value.code == "queue_not_found"
        with pytest.raises(InvalidInput):
            await c.configure_queue("jobs", QueueSettings(min_partitions=9, max_partitions=2))

        health = await c.health()
        assert (health.status, health.members) == ("serving", 1)
        (member,) = await c.ring()
        assert member.http == f"127.0.0.1:{node.port}"
        assert (await c.partitions("jobs"))[0].node == member.name


async def test_batches(node: NodeProcess) -> None:
    async with AsyncClient(node.url, token=ADMIN) as c:
        await c.create_queue("tracked")
        batch = await c.open_batch("exact", user_key="nightly")
        blocks = await c.add_items(batch, 3)
        items = [i for b in blocks for i in b.item_ids()]
        assert len(items) == 3 and all(i.startswith(f"{batch}:") for i in items)
        ids = await c.enqueue(
            "tracked",
            [NewMessage(f"m{i}", {"dynaq.batch_item": item}) for i, item in enumerate(items)],
        )
        assert await c.close_batch(batch) is False
        assert await c.ack_items(items[:1]) == []
        got = await c.receive("tracked", 10)
        assert (
            await c.delete("tracked", [m.id for m in got if m.id != ids[0]]) == 2
        )  # acks the rest
        info = await c.describe_batch(batch)
        assert (info.complete, info.pending, info.user_key, info.mode) == (
            True,
            0,
            "nightly",
            "exact",
        )
        assert await c.delete_batch(batch) == 3

        est = await c.open_batch("estimated")
        assert (await c.incr_batch(est, 2)).pending == 2
        assert await c.close_batch(est, "estimated") is False
        (done,) = await c.decr_batches({est: 2})
        assert done.batch_id == est
        assert await c.remove_batches("estimated", "closed", 2**42) == (1, 2)  # (batches, items)


async def test_errors_are_the_servers_classes(node: NodeProcess) -> None:
    async with AsyncClient(node.url) as anonymous:
        with pytest.raises(Unauthorized):
            await anonymous.list_queues()
    async with AsyncClient(node.url, token=READER) as reader:
        with pytest.raises(Forbidden) as err:
            await reader.create_queue("nope")
        assert err.value.code == "forbidden" and READER not in str(err.value)
    async with AsyncClient(f"{node.url}", token=ADMIN) as c:
        with pytest.raises(UnexpectedResponse) as unexpected:
            # An answer of a shape the call does not expect.
            await c._run(ops.single(ops.Call("GET", "/health", lambda got: got["no such member"])))
        assert "unexpected answer" in str(unexpected.value)


async def test_the_blocking_client_does_the_same(node: NodeProcess) -> None:
    def round_trip() -> list[bytes]:
        with Client([node.url], token=ADMIN) as c:
            c.create_queue("sync-jobs", QueueSettings(visibility_timeout_s=10))
            ids = c.enqueue("sync-jobs", [b"a", {"body": b"b", "attributes": {"x": "1"}}])
            assert c.send("sync-jobs", "c") > max(ids)
            got = c.receive("sync-jobs", 10, wait_time_s=1)
            assert c.delete("sync-jobs", [m.id for m in got]) == 3
            with pytest.raises(QueueNotFound):
                c.describe_queue("missing")
            return sorted(m.body for m in got)

    assert await asyncio.to_thread(round_trip) == [b"a", b"b", b"c"]


async def test_a_closed_client_refuses_requests(node: NodeProcess) -> None:
    """A closed client had kept working (the async one on a new, leaked connection)."""
    c = AsyncClient(node.url, token=ADMIN)
    assert isinstance(await c.list_queues(), list)
    await c.close()
    with pytest.raises(RuntimeError, match="closed"):
        await c.list_queues()

    def blocking() -> None:
        s = Client(node.url, token=ADMIN)
        s.list_queues()
        s.close()
        with pytest.raises(RuntimeError, match="closed"):
            s.list_queues()

    await asyncio.to_thread(blocking)
