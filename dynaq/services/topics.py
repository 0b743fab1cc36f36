"""Topics: publish once, every subscribed queue gets a copy.

A publish writes every copy in one storage batch, so it is atomic: either
every subscribed queue has the message or none has (the store's batch
guarantee). Group and dedup id travel with each copy; dedup is per queue.
Subscriptions to queues deleted since are skipped.

A subscription may carry a filter policy (SNS's grammar on attributes,
:mod:`dynaq.core.filters`): its queue gets only the messages that match, and a
queue that matches none of a publish gets nothing (and no entry in the
answer). A subscription with ``raw`` off gets each message wrapped in a JSON
envelope ``{"Type": "Notification", "Topic", "Message", "MessageAttributes",
"Timestamp"}`` (``Message`` is the body as text, or base64 with
``"MessageEncoding": "base64"`` when it is not UTF-8).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from dataclasses import replace

from dynaq.core.filters import Predicate, compile_policy
from dynaq.core.messages import NewMessage
from dynaq.errors import QueueNotFound
from dynaq.services.catalog import Catalog, QueueInfo
from dynaq.services.queue_records import Subscription
from dynaq.services.queues.writes import PreparedWrite, Writer
from dynaq.storage.base import Op, Store


class TopicService:
    """Fanout of published messages to subscribed queues."""

    def __init__(
        self,
        store: Store,
        catalog: Catalog,
        writer: Writer,
        clock_ms: Callable[[], int],
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._writer = writer
        self._clock_ms = clock_ms
        # compiled filter policies per (topic, queue), recompiled when the subscription changes
        self._policies: dict[tuple[str, str], tuple[Subscription, Predicate]] = {}

    async def publish(
        self, topic: str, messages: Sequence[NewMessage], *, with_ops: Sequence[Op] = ()
    ) -> dict[str, list[int]]:
        """Publish ``messages`` to every queue subscribed to ``topic``; return ids per queue.

        ``with_ops`` are written in the same store batch as the copies: all or
        none (a caller's marker that the publish happened).
        """
        info = await self._catalog.topic(topic)
        self._writer.check_batch(messages)
        targets: list[tuple[QueueInfo, list[NewMessage]]] = []
        for name in info.queues:
            try:
                q = await self._catalog.queue(name)
            except QueueNotFound:
                continue
            copies = self._copies(topic, name, info.subscription(name), messages)
            if copies:
                targets.append((q, copies))

        async def write() -> list[PreparedWrite]:
            writes: list[PreparedWrite] = []
            async with self._writer.dedup_guard([q for q, _ in targets], messages):
                for q, copies in targets:
                    writes.append(await self._writer.prepare(q, copies))
                ops: list[Op] = [op for w in writes for op in w.ops]
                ops.extend(with_ops)
                if ops:
                    await self._store.write_batch(ops)
            for w in writes:
                self._writer.note_written(w)
            return writes

        writes = await self._writer.run_to_completion(write(), messages)
        return {w.info.name: w.ids for w in writes}

    def _copies(
        self, topic: str, queue: str, sub: Subscription, messages: Sequence[NewMessage]
    ) -> list[NewMessage]:
        """What one subscription receives of ``messages``: the matching ones, enveloped
        unless the subscription is raw."""
        picked = list(messages)
        if sub.filter_policy is not None:
            matches = self._policies.get((topic, queue))
            if matches is None or matches[0] != sub:
                matches = (sub, compile_policy(sub.filter_policy))
                self._policies[topic, queue] = matches
            picked = [m for m in picked if matches[1](m.attributes)]
        if sub.raw:
            return picked
        now_ms = self._clock_ms()
        return [replace(m, body=_envelope(topic, m, now_ms)) for m in picked]


def _envelope(topic: str, m: NewMessage, now_ms: int) -> bytes:
    out: dict[str, object] = {"Type": "Notification", "Topic": topic}
    try:
        out["Message"] = m.body.decode()
    except UnicodeDecodeError:
        out["Message"] = base64.b64encode(m.body).decode()
        out["MessageEncoding"] = "base64"
    out["MessageAttributes"] = m.attributes or {}
    out["Timestamp"] = now_ms
    return json.dumps(out).encode()
