"""A topic-fanout workload through the real HTTP API, and its checker.

The README promises that a publish to a topic writes every subscribed queue's
copy in one batch: **all or none**, and that an acknowledged publish is never
lost from any of its queues. This workload checks both under faults:
producers publish uniquely tokened messages to one topic subscribed by several
queues; a consumer per queue long-polls, receives and deletes; after the drain
:func:`~dynaq.testing.fanout_history.check_fanout` reports, per acknowledged publish, every queue it is
missing from (``lost``), and, for every message seen in any queue (acknowledged
or not: a publish whose answer was lost may have landed), the queues it never
reached (``partial``: must be 0).

With ``filters``, queues subscribe with filter policies (on attributes or on
the JSON body) and every message carries a random colour attribute and a body
``{"token", "order": {"total", "region"}}``. Which queues a message belongs to
is then decided by each filter's ``wants``, a plain-Python oracle written
independently of the node's matcher: a message must reach exactly those
queues (``misrouted``: copies in a queue whose filter refuses it, must be 0;
``lost`` and ``partial`` count only the queues that want it), and each
acknowledged publish must name exactly those queues in its answer.

    history = await run_fanout(FanoutWorkload(endpoints=[node.url]), faults)
    verdict = check_fanout(history)
    assert verdict.ok, verdict.as_dict()
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from dynaq.testing.fanout_history import (
    FanoutHistory,
    Publish,
)
from dynaq.testing.history import History

FanoutFaults = Callable[[History], Awaitable[None]]
"""Injects faults while the load runs (recorded in the history's ``faults``)."""

COLOURS = ("red", "green", "blue")
REGIONS = ("eu-west", "eu-north", "us-east")


@dataclass(frozen=True)
class Sample:
    """What a filter sees of one message: its attributes and its JSON body."""

    attributes: dict[str, str]
    body: dict[str, Any]


@dataclass(frozen=True)
class Filter:
    """One queue's subscription filter and the oracle that says what it lets in."""

    policy: dict[str, Any]
    scope: str  # "attributes" or "body"
    wants: Callable[[Sample], bool]


@dataclass
class FanoutWorkload:
    """What to run. Endpoints are base URLs; requests rotate over them."""

    endpoints: list[str]
    topic: str = "fanout"
    queues: tuple[str, ...] = ("fanout-a", "fanout-b", "fanout-c")
    producers: int = 3
    consumers_per_queue: int = 2
    messages: int = 1_500
    duration_s: float = 20.0
    batch: int = 10
    visibility_timeout_s: float = 3.0
    request_timeout_s: float = 5.0
    drain_max_s: float = 120.0
    seed: int | None = None
    token: str | None = None
    config_settle_s: float = 2.5
    """Wait after subscribing before publishing: subscriptions reach the other nodes
    of a ring within their ``sync.interval_s`` (1 s in the harness), as the README says."""
    filters: dict[str, Filter] = field(default_factory=dict)
    """queue -> its subscription filter (queues not named take every message)."""


class _FanoutRunner:
    def __init__(self, w: FanoutWorkload, fh: FanoutHistory) -> None:
        self.w = w
        self.fh = fh
        self.h = fh.history
        self.rng = random.Random(w.seed)
        self.run_id = uuid.uuid4().hex[:8]
        self.left = w.messages
        self.draining = False
        self.last_delivery = self.h.now()
        self._next = itertools.count()

    def endpoint(self) -> str:
        return self.w.endpoints[next(self._next) % len(self.w.endpoints)]

    async def post(
        self, http: aiohttp.ClientSession, op: str, path: str, body: Any, endpoint: str = ""
    ) -> Any:
        """POST through ``endpoint`` or the next one: (status, JSON or None); 0 when no
        answer came."""
        try:
            async with http.post((endpoint or self.endpoint()) + path, json=body) as r:
                self.h.responses[f"{op} {r.status}"] += 1
                return r.status, (await r.json(content_type=None)) if r.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
            self.h.responses[f"{op} exc"] += 1
            return 0, None

    async def produce(self, http: aiohttp.ClientSession, pid: int) -> None:
        deadline = self.h.now() + self.w.duration_s
        seq = 0
        while self.left > 0 and self.h.now() < deadline:
            n = min(self.left, self.rng.randint(1, self.w.batch))
            self.left -= n
            tokens = [f"{self.run_id}-{pid}-{seq + i}" for i in range(n)]
            seq += n
            publish = Publish(tokens, endpoint=self.endpoint())
            self.fh.publishes.append(publish)
            body = {"messages": [self.message(t, publish) for t in tokens]}
            path = f"/v2/topics/{self.w.topic}/messages"
            status, data = await self.post(http, "publish", path, body, publish.endpoint)
            # 4xx and 507 stored nothing; anything else unanswered may have landed.
            if status == 200:
                publish.outcome = "ok"
                publish.ids = data["ids"]
            elif 400 <= status < 500 or status == 507:
                publish.outcome = "failed"
            if status != 200:
                await asyncio.sleep(0.05)  # a node is down: do not spin

    def message(self, token: str, publish: Publish) -> dict[str, Any]:
        """The publish item for ``token``; with filters, a random sample routed by
        the filters' oracles (recorded in ``publish.routes``)."""
        w = self.w
        if not w.filters:
            return {"body": token}
        sample = Sample(
            {"colour": self.rng.choice(COLOURS)},
            {
                "token": token,
                "order": {
                    "total": self.rng.randint(0, 200),
                    "region": self.rng.choice(REGIONS),
                },
            },
        )
        publish.routes[token] = [
            q for q in w.queues if q not in w.filters or w.filters[q].wants(sample)
        ]
        return {"body": json.dumps(sample.body), "attributes": sample.attributes}

    async def consume(self, http: aiohttp.ClientSession, queue: str) -> None:
        w = self.w
        got = self.fh.delivered[queue]
        # Each consumer walks every endpoint on its own: with one shared rotation,
        # N consumers over N endpoints fall into lockstep and each one polls a
        # single node for ever, never the one that owns its messages.
        first = self.rng.randrange(len(w.endpoints))
        endpoints = itertools.cycle(w.endpoints[first:] + w.endpoints[:first])
        quiet_s = w.visibility_timeout_s + 3.0
        drain_started: float | None = None
        body = {
            "max_messages": 4 * w.batch,
            "visibility_timeout_s": w.visibility_timeout_s,
            "wait_time_s": 0.5,
        }
        while True:
            now = self.h.now()
            if self.draining:
                drain_started = drain_started or now
                if now - self.last_delivery > quiet_s:
                    return
                if now - drain_started > w.drain_max_s:
                    self.fh.drained = False
                    return
            at = next(endpoints)
            path = f"/v2/queues/{queue}/messages/receive"
            status, data = await self.post(http, "receive", path, body, at)
            if status != 200 or not data["messages"]:
                if status != 200:
                    await asyncio.sleep(0.05)
                continue
            self.last_delivery = self.h.now()
            for m in data["messages"]:
                got[_token(m["body"]) if w.filters else m["body"]] += 1
            ids = {"ids": [m["id"] for m in data["messages"]]}
            await self.post(http, "delete", f"/v2/queues/{queue}/messages/delete", ids, at)


async def run_fanout(workload: FanoutWorkload, faults: FanoutFaults | None = None) -> FanoutHistory:
    """Create the topic and its queues, run producers, consumers and ``faults`` to the
    end of the drain, and return what was observed."""
    fh = FanoutHistory(workload.queues)
    fh.delivered = {q: Counter() for q in workload.queues}
    runner = _FanoutRunner(workload, fh)
    timeout = aiohttp.ClientTimeout(total=workload.request_timeout_s + 1.0)
    headers = {} if workload.token is None else {"Authorization": f"Bearer {workload.token}"}
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as http:
        await _create_topic(http, workload)
        if len(workload.endpoints) > 1:
            await asyncio.sleep(workload.config_settle_s)
        consumers = [
            asyncio.create_task(runner.consume(http, q))
            for q in workload.queues
            for _ in range(workload.consumers_per_queue)
        ]
        try:
            jobs: list[Awaitable[Any]] = [
                runner.produce(http, p) for p in range(workload.producers)
            ]
            if faults is not None:
                jobs.append(faults(fh.history))
            await asyncio.gather(*jobs)
            runner.draining = True
            await asyncio.gather(*consumers)
            if fh.drained is None:
                fh.drained = True
        finally:
            for c in consumers:
                c.cancel()
            await asyncio.gather(*consumers, return_exceptions=True)
    return fh


def _token(body: str) -> str:
    """The token of a filtered run's message (its body as published, if not JSON)."""
    try:
        data = json.loads(body)
    except ValueError:
        return body
    return str(data["token"]) if isinstance(data, dict) and "token" in data else body


async def _create_topic(http: aiohttp.ClientSession, w: FanoutWorkload) -> None:
    """Create the queues (with the workload's visibility timeout) and the topic, and
    subscribe them, through the first endpoint that answers: every step is idempotent."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        for base in w.endpoints:
            try:
                if await _set_up_through(http, base, w):
                    return
            except (aiohttp.ClientError, TimeoutError, OSError):
                continue
        if asyncio.get_running_loop().time() > deadline:
            raise RuntimeError(f"could not set up topic {w.topic!r} through {w.endpoints}")
        await asyncio.sleep(0.2)


async def _set_up_through(http: aiohttp.ClientSession, base: str, w: FanoutWorkload) -> bool:
    """One attempt through one node; False when a step was refused."""
    exists = (200, 201, 422)  # 422: it exists already
    for q in w.queues:
        async with http.put(f"{base}/v1/queues/{q}") as r:
            if r.status not in exists:
                return False
        patch = {"visibility_timeout": w.visibility_timeout_s}
        async with http.patch(f"{base}/v1/queues/{q}", json=patch) as r:
            if r.status != 200:
                return False
    async with http.put(f"{base}/v1/topics/{w.topic}") as r:
        if r.status not in exists:
            return False
    for q in w.queues:
        f = w.filters.get(q)
        options = (
            None
            if f is None
            else {"filter_policy": f.policy, "filter_scope": f.scope, "raw_delivery": True}
        )
        async with http.put(f"{base}/v1/topics/{w.topic}/queues/{q}", json=options) as r:
            if r.status != 200:
                return False
    return True
