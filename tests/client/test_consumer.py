"""The consumer and producer helpers against real node processes, under kill -9."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import pytest

from dynaq.client import AsyncClient, Consumer, Delivery, NewMessage, RetryPolicy
from dynaq.errors import DynaqError, InvalidInput, QueueNotFound, Unauthorized, Unreachable
from dynaq.testing import History, check
from dynaq.testing.history import Delivery as Seen
from dynaq.testing.process import NodeProcess, node_process

PATIENT = RetryPolicy(attempts=50, max_delay_s=0.5, deadline_s=20)


async def _started(tmp_path: Path, **env: str) -> NodeProcess:
    p = node_process(tmp_path, env=env)
    await asyncio.to_thread(p.start)
    return p


async def _produce(c: AsyncClient, history: History, count: int, block: int) -> None:
    """Enqueue ``count`` tokened messages in blocks, recording every outcome."""
    for start in range(0, count, block):
        tokens = [f"t{i}" for i in range(start, min(count, start + block))]
        sent = [history.sent(t) for t in tokens]
        try:
            ids = await c.enqueue("jobs", [t.encode() for t in tokens])
        except Unreachable as exc:
            for e in sent:
                e.outcome = "unknown" if exc.sent else "failed"
                e.completed = history.now()
            await asyncio.sleep(0.1)
            continue
        except DynaqError:
            for e in sent:
                e.outcome, e.completed = "failed", history.now()
            continue
        for e, mid in zip(sent, ids, strict=True):
            e.outcome, e.completed, e.message_id = "ok", history.now(), mid
        await asyncio.sleep(0.01)


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_the_consumer_loses_nothing_when_its_node_is_killed(tmp_path: Path) -> None:
    node = await _started(tmp_path)
    history = History()
    vt = 3.0
    try:
        async with AsyncClient(node.url, retry=PATIENT) as c:
            await c.create_queue("jobs")
            seen: set[str] = set()
            target: set[str] = set()
            drained = asyncio.Event()

            async def consume(consumer: Consumer) -> None:
                async for d in consumer:
                    token = d.body.decode()
                    now = history.now()
                    history.deliveries.append(
                        Seen(token, d.id, now, now, vt, d.receive_count, delete_invoked=now)
                    )
                    seen.add(token)
                    d.ack()
                    if target and target <= seen:
                        drained.set()

            async with c.consume(
                "jobs", concurrency=16, visibility_timeout_s=vt, wait_time_s=1, batch_size=16
            ) as consumer:
                consumer.ring_refresh_s = 1.0
                consuming = asyncio.create_task(consume(consumer))
                producing = asyncio.create_task(_produce(c, history, 3000, 50))
                await asyncio.sleep(1.5)
                fault = history.fault("kill -9", "the only node, restarted on its data")
                await asyncio.to_thread(node.kill)
                await asyncio.sleep(1.0)
                await asyncio.to_thread(node.start)
                fault.ended = history.now()
                await producing
                target.update(e.token for e in history.enqueues if e.outcome == "ok")
                if not target <= seen:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(drained.wait(), 60)
                history.drained = target <= seen
                consumer.stop()
                await consuming
            assert consumer.acked > 0
    finally:
        await asyncio.to_thread(node.kill)
    verdict = check(history)
    assert verdict.acked > 1000, verdict.figures()
    assert verdict.lost == 0 and verdict.ok, verdict.as_dict()


@pytest.mark.slow
async def test_heartbeats_keep_long_work_invisible(tmp_path: Path) -> None:
    node = await _started(tmp_path)
    try:
        async with AsyncClient(node.url) as c, AsyncClient(node.url) as other:
            await c.create_queue("slow")
            (mid,) = await c.enqueue("slow", [b"long job"])
            peeks: list[int] = []

            async def watch() -> None:
                # Another consumer asks all along while the work runs: never visible.
                while True:
                    got = await other.receive("slow", 10, visibility_timeout_s=2)
                    peeks.extend(m.id for m in got)
                    await asyncio.sleep(0.3)

            async with c.consume(
                "slow", concurrency=1, visibility_timeout_s=2, wait_time_s=1
            ) as consumer:
                async for d in consumer:
                    assert (d.id, d.receive_count) == (mid, 1)
                    watcher = asyncio.create_task(watch())
                    await asyncio.sleep(7)  # 3.5 visibility timeouts of work
                    watcher.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await watcher
                    assert not d.lost_lease
                    d.ack()
                    consumer.stop()
            assert peeks == []
            assert (await c.describe_queue("slow")).depth == 0  # the ack was flushed on close
    finally:
        await asyncio.to_thread(node.kill)


async def test_a_signal_stops_it_and_unyielded_messages_come_back_at_once(tmp_path: Path) -> None:
    node = await _started(tmp_path)
    try:
        async with AsyncClient(node.url) as c:
            await c.create_queue("q")
            await c.enqueue("q", [b"%d" % i for i in range(20)])
            handled = []
            consumer = c.consume(
                "q",
                concurrency=20,
                batch_size=20,
                visibility_timeout_s=60,
                wait_time_s=1,
                stop_signals=(signal.SIGUSR1,),
            )
            async for d in consumer:
                handled.append(d.body)
                d.ack()
                os.kill(os.getpid(), signal.SIGUSR1)
            assert len(handled) == 1
            # Received but never yielded: released, so visible now (not in 60 s).
            back = await c.receive("q", 100, wait_time_s=1)
            # (A long poll still in flight at the stop may have taken a released
            # message once more, and released it too.)
            assert len(back) == 19 and all(m.receive_count >= 2 for m in back)
            assert (await c.describe_queue("q")).depth == 19
    finally:
        await asyncio.to_thread(node.kill)


async def test_run_acks_what_succeeds_and_releases_what_fails(tmp_path: Path) -> None:
    node = await _started(tmp_path)
    try:
        async with AsyncClient(node.url) as c:
            await c.create_queue("work")
            async with c.producer("work", linger_s=0.01) as producer:
                ids = await asyncio.gather(*(producer.send(f"job-{i}") for i in range(300)))
            assert len(set(ids)) == 300
            assert (await c.describe_queue("work")).depth == 300
            done: list[bytes] = []
            failed_once: set[int] = set()
            consumer = c.consume("work", concurrency=8, visibility_timeout_s=30, wait_time_s=1)

            async def handler(d: Delivery) -> None:
                if d.body == b"job-7" and d.id not in failed_once:
                    failed_once.add(d.id)
                    raise RuntimeError("first try fails")
                done.append(d.body)
                if len(done) == 300:
                    consumer.stop()

            await asyncio.wait_for(consumer.run(handler), 60)
            assert sorted(done) == sorted(f"job-{i}".encode() for i in range(300))
            assert (await c.describe_queue("work")).depth == 0
            # A topic producer resolves with each subscribed queue's id.
            await c.create_topic("t")
            await c.subscribe("t", "work")
            async with c.producer(topic="t") as to_topic:
                got = await to_topic.send(NewMessage("x").body)
            assert isinstance(got, dict) and set(got) == {"work"}
    finally:
        await asyncio.to_thread(node.kill)


async def test_an_error_no_retry_can_change_stops_it_and_is_raised(tmp_path: Path) -> None:
    """A missing queue, a refused token or a setting out of range used to look like an
    idle queue (the consumer retried forever, logging at INFO); a node that is down
    is still retried."""
    node = await _started(tmp_path, DYNAQ_AUTH_TOKENS="ops:consumer-token-0123:admin=*")
    try:
        async with AsyncClient(node.url, token="consumer-token-0123") as c:
            with pytest.raises(QueueNotFound):
                async for _ in c.consume("nope", concurrency=2, wait_time_s=1):
                    pass
            await c.create_queue("q")
            consumer = c.consume("q", concurrency=2, wait_time_s=1, visibility_timeout_s=50_000)
            with pytest.raises(InvalidInput):
                await asyncio.wait_for(consumer.run(_never), 20)
            assert isinstance(consumer.failure, InvalidInput)
        async with AsyncClient(node.url, token="wrong-token-000000000") as bad:
            with pytest.raises(Unauthorized):
                async for _ in bad.consume("q", concurrency=2, wait_time_s=1):
                    pass
    finally:
        await asyncio.to_thread(node.kill)


async def _never(d: Delivery) -> None:
    raise AssertionError(f"nothing was enqueued, got {d.id}")
