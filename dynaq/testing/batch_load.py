"""Batches in the recorded workload: the producer side and the reads after the drain.

A producer turns a share of its sends into one exact batch each: it opens
the batch, adds one item per message, tags each message with its item id
(attribute ``dynaq.batch_item``), sends them and closes the batch; consumers
ack the items by deleting the messages, as any consumer does. After the
drain, :meth:`WorkloadBatches.observe` reads each batch's status until every
batch that is due (see :func:`~dynaq.testing.history.batch_due`) says
complete, and, when the nodes publish completions to a topic, reads that
topic's events through a queue subscribed to it: each distinct event
message counts as one completion. Both reads are bounded in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from dynaq.testing.history import History, TrackedBatch
from dynaq.testing.verdict import batch_due, deliveries_by_token

BATCH_BASE = "/api/v1/batch/exact"
ITEM_ATTRIBUTE = "dynaq.batch_item"

Request = Callable[
    [aiohttp.ClientSession, str, str, str, "dict[str, Any] | None"], Awaitable[tuple[int, Any]]
]
"""``(http, method, op, path, body) -> (status, json)`` through the workload's next endpoint;
raises on a request that got no answer."""

_NO_ANSWER = (aiohttp.ClientError, TimeoutError, OSError, ValueError)


def completion_queue(queue: str) -> str:
    """The queue subscribed to the completion topic for a workload on ``queue``."""
    return f"{queue}-batch-done"


class WorkloadBatches:
    """Opens, tags and closes the workload's batches, and reads how they completed."""

    def __init__(
        self, history: History, request: Request, completion_topic: str | None, queue: str
    ) -> None:
        self.h = history
        self.request = request
        self.topic = completion_topic
        self.events_queue = completion_queue(queue)

    async def open(self, http: aiohttp.ClientSession, n: int) -> tuple[str, list[str]] | None:
        """Open a batch with ``n`` items; its id and item ids, or ``None`` if refused or
        unanswered (the messages are then sent untagged; the batch stays open and
        untracked)."""
        try:
            status, data = await self.request(http, "POST", "batch open", BATCH_BASE, {})
            if status != 200:
                return None
            batch_id = data["batchId"]
            body = {"batchId": batch_id, "items": n}
            status, data = await self.request(
                http, "POST", "batch items", BATCH_BASE + "/items", body
            )
        except _NO_ANSWER:
            return None
        if status != 200:
            return None
        ids = [
            f"{batch_id}:{g['id']}:{i}" for g in data["batchItemGroupIds"] for i in range(g["upto"])
        ]
        return str(batch_id), ids[:n]

    def track(self, batch_id: str, tokens: list[str]) -> TrackedBatch:
        b = TrackedBatch(batch_id, tokens, self.h.now())
        self.h.batches[batch_id] = b
        return b

    async def close(self, http: aiohttp.ClientSession, b: TrackedBatch) -> None:
        """Close ``b``, retrying an unanswered close (closing again is harmless: it
        answers whether the batch is complete, now or already)."""
        for attempt in range(3):
            try:
                status, data = await self.request(
                    http, "POST", "batch close", f"{BATCH_BASE}/close/{b.batch_id}", None
                )
            except _NO_ANSWER:
                await asyncio.sleep(0.2 * (attempt + 1))
                continue
            b.closed_at = self.h.now()
            if status == 200:
                b.closed = "ok"
                b.close_said_complete = bool(data["isComplete"])
                return
            if 400 <= status < 500:
                b.closed = "failed"
                return
            await asyncio.sleep(0.2 * (attempt + 1))

    async def observe(self, http: aiohttp.ClientSession, max_s: float) -> None:
        """After the drain: read every batch's status until each due batch is complete,
        then the completion events, within ``max_s`` seconds in all."""
        deadline = self.h.now() + max_s
        by_token = deliveries_by_token(self.h)
        due = [b for b in self.h.batches.values() if batch_due(b, by_token)]
        others = [b for b in self.h.batches.values() if b not in due and b.closed != "failed"]
        await self._read_status(http, others, deadline, once=True)
        await self._read_status(http, due, deadline, once=False)
        if self.topic is not None:
            self.h.completion_events = True
            complete = {b.batch_id for b in self.h.batches.values() if b.status_complete}
            await self._read_events(http, complete, deadline)

    async def _read_status(
        self, http: aiohttp.ClientSession, batches: list[TrackedBatch], deadline: float, once: bool
    ) -> None:
        todo = list(batches)
        while todo and self.h.now() < deadline:
            for b in list(todo):
                try:
                    status, data = await self.request(
                        http, "GET", "batch status", f"{BATCH_BASE}/{b.batch_id}", None
                    )
                except _NO_ANSWER:
                    continue
                if status == 200:
                    b.status_complete = bool(data["isComplete"])
                    if b.status_complete or once:
                        todo.remove(b)
            if once:
                return
            if todo:
                await asyncio.sleep(0.5)

    async def _read_events(
        self, http: aiohttp.ClientSession, complete: set[str], deadline: float
    ) -> None:
        """Receive and delete completion events until every complete batch has one and
        a few receives in a row found nothing (a repeat would have shown by then)."""
        ids: dict[str, set[int]] = defaultdict(set)
        path = f"/v2/queues/{self.events_queue}/messages"
        empty = 0
        while self.h.now() < deadline:
            body = {"max_messages": 100, "visibility_timeout_s": 30, "wait_time_s": 0.5}
            try:
                status, data = await self.request(
                    http, "POST", "event receive", path + "/receive", body
                )
            except _NO_ANSWER:
                continue
            got = data["messages"] if status == 200 else []
            for m in got:
                batch_id = str(json.loads(m["body"])["batchId"])
                ids[batch_id].add(int(m["id"]))
            if got:
                empty = 0
                delete = {"ids": [m["id"] for m in got]}
                # Unanswered: served again after 30 s, and counted once by its id.
                with contextlib.suppress(*_NO_ANSWER):
                    await self.request(http, "POST", "event delete", path + "/delete", delete)
            else:
                empty += 1
                if empty >= 6 and complete <= ids.keys():
                    break
        for batch_id, seen in ids.items():
            self.h.completions[batch_id] = len(seen)
