"""A bounded queue workload through the real HTTP API, recorded for the history checker.

Producers send uniquely tokened messages (some in message groups, some sent
twice with one dedup id, as a retrying producer would; a share of sends
forms one tracked batch each, see :mod:`dynaq.testing.batch_load`); consumers long-poll,
receive and delete in batches, rotating over every endpoint (a node serves
only its own slice, as behind HAProxy). A fault coroutine runs alongside.
When producers are done (by count or time) and the faults have ended,
consumers drain until nothing has arrived for a visibility timeout and a
bit; then each batch's completion is read. Every loop is bounded in count and time.

    history = await run_workload(Workload(endpoints=[node.url], queue="jobs"))
    verdict = check(history)
    assert verdict.ok, verdict.as_dict()
"""

from __future__ import annotations

import asyncio
import itertools
import random
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from dynaq.testing.batch_load import ITEM_ATTRIBUTE, WorkloadBatches, completion_queue
from dynaq.testing.history import Delivery, Enqueue, History, Outcome

FaultPlan = Callable[[History], Awaitable[None]]
"""Injects faults while the load runs, recording each in the history; returns when done."""


@dataclass
class Workload:
    """What to run. Endpoints are base URLs (``http://127.0.0.1:port``)."""

    endpoints: list[str]
    queue: str = "history"
    producers: int = 4
    consumers: int = 4
    messages: int = 2_000
    """Most messages sent (not counting dedup retries)."""
    duration_s: float = 30.0
    """Longest time producers send for."""
    batch: int = 10
    group_share: float = 0.3
    groups_per_producer: int = 3
    dedup_share: float = 0.1
    visibility_timeout_s: float = 5.0
    request_timeout_s: float = 5.0
    drain_max_s: float = 120.0
    create_queue: bool = True
    seed: int | None = None
    token: str | None = None
    """Bearer token sent with every request (nodes with ``auth.tokens``)."""
    batch_share: float = 0.2
    """Share of producer sends whose messages form one exact batch (an item per
    message, acked by its delete): each such batch must complete exactly once."""
    completion_topic: str | None = None
    """The nodes' ``batches.completion_topic``: when set, the workload creates it,
    subscribes a queue to it and counts each batch's completion events."""
    batch_check_max_s: float = 30.0
    """Longest time after the drain to wait for due batches to read complete."""
    delete_by_receipt: bool = False
    """Delete with each delivery's receipt instead of its id: a delete of a delivery
    that was redelivered meanwhile is refused (and recorded as not deleted), so
    the checker holds receipts to their word under the run's faults."""
    max_rate_per_s: float | None = None
    """Most messages per second all producers send together (``None``: as fast as
    answered). A soak keeps it below what consumers sustain, or the drain cannot end."""


def _outcome(status: int) -> Outcome:
    """What an answer says about the write: 4xx and 507 (insufficient storage) are
    refusals, nothing was stored; any other 5xx may have landed or not."""
    if status == 200:
        return "ok"
    return "failed" if 400 <= status < 500 or status == 507 else "unknown"


class _Runner:
    def __init__(self, w: Workload, history: History) -> None:
        self.w = w
        self.h = history
        self.rng = random.Random(w.seed)
        self.run_id = uuid.uuid4().hex[:8]
        self.left = w.messages
        self.producing = True
        self.draining = False
        self.last_delivery = history.now()
        self._next_endpoint = itertools.count()
        self.batches = WorkloadBatches(history, self.request, w.completion_topic, w.queue)

    def endpoint(self) -> str:
        return self.w.endpoints[next(self._next_endpoint) % len(self.w.endpoints)]

    async def post(
        self, http: aiohttp.ClientSession, op: str, path: str, body: dict[str, Any]
    ) -> tuple[int, Any]:
        return await self.request(http, "POST", op, path, body)

    async def request(
        self,
        http: aiohttp.ClientSession,
        method: str,
        op: str,
        path: str,
        body: dict[str, Any] | None,
    ) -> tuple[int, Any]:
        """A request through the next endpoint; every answer (or its absence) is counted."""
        try:
            async with http.request(method, self.endpoint() + path, json=body) as r:
                if r.status == 200:
                    data = await r.json(content_type=None)
                    self.h.responses[f"{op} 200"] += 1
                    return r.status, data
                try:
                    code = (await r.json(content_type=None)).get("code", "")
                except (ValueError, AttributeError, aiohttp.ContentTypeError):
                    code = ""
                self.h.responses[f"{op} {r.status} {code}".rstrip()] += 1
                return r.status, None
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
            self.h.responses[f"{op} exc"] += 1
            raise

    async def produce(self, http: aiohttp.ClientSession, pid: int) -> None:
        seq = 0
        started = self.h.now()
        deadline = started + self.w.duration_s
        path = f"/v2/queues/{self.w.queue}/messages"
        rate = self.w.max_rate_per_s
        while self.left > 0 and self.h.now() < deadline:
            if rate:  # pace: this producer's share of the rate
                ahead = seq / (rate / self.w.producers) - (self.h.now() - started)
                if ahead > 0:
                    await asyncio.sleep(min(ahead, max(0.0, deadline - self.h.now())))
                    continue
            n = min(self.left, self.rng.randint(1, self.w.batch))
            self.left -= n
            sent: list[Enqueue] = []
            items: list[dict[str, Any]] = []
            batch = None
            if self.rng.random() < self.w.batch_share:
                batch = await self.batches.open(http, n)
            for i in range(n):
                token = f"{self.run_id}-{pid}-{seq}"
                seq += 1
                group = None
                if self.rng.random() < self.w.group_share:
                    group = (
                        f"{self.run_id}-p{pid}-g{self.rng.randrange(self.w.groups_per_producer)}"
                    )
                dedup = token if self.rng.random() < self.w.dedup_share else None
                sent.append(self.h.sent(token, group, dedup))
                item: dict[str, Any] = {"body": token}
                if group is not None:
                    item["group"] = group
                if dedup is not None:
                    item["dedup_id"] = dedup
                if batch is not None:
                    item["attributes"] = {ITEM_ATTRIBUTE: batch[1][i]}
                items.append(item)
            await self._send(http, path, sent, items)
            # A producer that retries: the same messages again, under their dedup ids.
            retry = [(e, i) for e, i in zip(sent, items, strict=True) if e.dedup_id is not None]
            if retry:
                again = [self.h.sent(e.token, e.group, e.dedup_id) for e, _ in retry]
                await self._send(http, path, again, [i for _, i in retry])
            if batch is not None:
                tracked = self.batches.track(batch[0], [e.token for e in sent])
                await self.batches.close(http, tracked)

    async def _send(
        self,
        http: aiohttp.ClientSession,
        path: str,
        sent: list[Enqueue],
        items: list[dict[str, Any]],
    ) -> None:
        try:
            status, data = await self.post(http, "enqueue", path, {"messages": items})
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
            status, data = 0, None
        now = self.h.now()
        outcome = _outcome(status) if status else "unknown"
        for i, e in enumerate(sent):
            e.completed = now
            e.outcome = outcome
            if outcome == "ok":
                e.message_id = int(data["ids"][i])
        if outcome != "ok":
            await asyncio.sleep(0.05)  # a node is down: do not spin

    async def consume(self, http: aiohttp.ClientSession) -> None:
        w = self.w
        quiet_s = w.visibility_timeout_s + 3.0
        receive = f"/v2/queues/{w.queue}/messages/receive"
        delete = f"/v2/queues/{w.queue}/messages/delete"
        drain_started: float | None = None
        while True:
            now = self.h.now()
            if self.draining:
                drain_started = drain_started or now
                if now - self.last_delivery > quiet_s:
                    return
                if now - drain_started > w.drain_max_s:
                    self.h.drained = False  # still delivering: undelivered may be a backlog
                    return
            invoked = self.h.now()
            body = {
                "max_messages": w.batch,
                "visibility_timeout_s": w.visibility_timeout_s,
                "wait_time_s": 0.5,
            }
            try:
                status, data = await self.post(http, "receive", receive, body)
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
                await asyncio.sleep(0.05)
                continue
            if status != 200 or not data["messages"]:
                if status != 200:
                    await asyncio.sleep(0.05)
                continue
            received = self.h.now()
            self.last_delivery = received
            got = [
                Delivery(
                    m["body"],
                    int(m["id"]),
                    received,
                    invoked,
                    w.visibility_timeout_s,
                    int(m.get("receive_count", 0)),
                    receipt=m.get("receipt"),
                )
                for m in data["messages"]
            ]
            self.h.deliveries.extend(got)
            for d in got:
                d.delete_invoked = self.h.now()
            if w.delete_by_receipt:
                receipts = [str(m["receipt"]) for m in data["messages"]]
                ask: dict[str, list[str]] = {"receipts": receipts}
            else:
                ask = {"ids": [str(d.message_id) for d in got]}
            refused: set[str] = set()
            try:
                status, answer = await self.post(http, "delete", delete, ask)
                outcome = _outcome(status)
                if status == 200 and w.delete_by_receipt:
                    refused = {r["receipt"] for r in answer.get("refused", [])}
                    self.h.responses["delete stale receipts"] += len(refused)
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
                outcome = "unknown"
            done = self.h.now()
            for d, m in zip(got, data["messages"], strict=True):
                # A refused receipt deleted nothing: its message was served again.
                d.delete_outcome = "failed" if m.get("receipt") in refused else outcome
                d.delete_completed = done


async def run_workload(
    workload: Workload, faults: FaultPlan | None = None, history: History | None = None
) -> History:
    """Run ``workload`` (and ``faults`` alongside it) to the end of the drain; return the history."""
    h = history if history is not None else History()
    runner = _Runner(workload, h)
    timeout = aiohttp.ClientTimeout(total=workload.request_timeout_s + 1.0)
    headers = {} if workload.token is None else {"Authorization": f"Bearer {workload.token}"}
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as http:
        if workload.create_queue:
            await _create_queue(http, workload)
        if workload.completion_topic is not None:
            await _subscribe_completions(http, workload, workload.completion_topic)
        consumers = [asyncio.create_task(runner.consume(http)) for _ in range(workload.consumers)]
        try:
            producers = [runner.produce(http, p) for p in range(workload.producers)]
            jobs: list[Awaitable[Any]] = [*producers]
            if faults is not None:
                jobs.append(faults(h))
            await asyncio.gather(*jobs)
            runner.draining = True
            await asyncio.gather(*consumers)
            if h.drained is None:
                h.drained = True
            await runner.batches.observe(http, workload.batch_check_max_s)
        finally:
            for c in consumers:
                c.cancel()
            await asyncio.gather(*consumers, return_exceptions=True)
    return h


async def _subscribe_completions(http: aiohttp.ClientSession, w: Workload, topic: str) -> None:
    """Create the completion topic and a queue subscribed to it (both may exist already)."""
    queue = completion_queue(w.queue)
    steps = [  # (what to PUT, the answers that mean done: 422 is "exists already")
        (f"/v1/topics/{topic}", (201, 422)),
        (f"/v1/queues/{queue}", (201, 422)),
        (f"/v1/topics/{topic}/queues/{queue}", (200,)),
    ]
    deadline = asyncio.get_running_loop().time() + 30
    for step, done in steps:
        while True:
            base = w.endpoints[0]
            try:
                async with http.put(base + step) as r:
                    if r.status in done:
                        break
            except (aiohttp.ClientError, TimeoutError, OSError):
                pass
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(f"could not PUT {step} through {base}")
            await asyncio.sleep(0.2)


async def _create_queue(http: aiohttp.ClientSession, w: Workload) -> None:
    """Create the queue (and set its visibility timeout) through the first endpoint that answers."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        for base in w.endpoints:
            try:
                async with http.put(f"{base}/v1/queues/{w.queue}") as r:
                    if r.status not in (200, 201, 422):  # 422: it exists already
                        continue
                patch = {"visibility_timeout": w.visibility_timeout_s}
                async with http.patch(f"{base}/v1/queues/{w.queue}", json=patch) as r:
                    if r.status == 200:
                        return
            except (aiohttp.ClientError, TimeoutError, OSError):
                continue
        if asyncio.get_running_loop().time() > deadline:
            raise RuntimeError(f"could not create queue {w.queue!r} through {w.endpoints}")
        await asyncio.sleep(0.2)
