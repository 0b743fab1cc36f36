"""Topics: publish once, every subscribed queue gets a copy.

A publish writes every copy in one storage batch, so it is atomic: either
every subscribed queue has the message or none has (the store's batch
guarantee). Group and dedup id travel with each copy; dedup is per queue.
Subscriptions to queues deleted since are skipped.

A topic with ``history`` also keeps what is published in a stream (see
:func:`history_entries`): after the copies are durable, the publish appends
one entry per message through :data:`HistorySink`; a failure there fails
the publish (a retry may deliver the copies twice; dedup ids prevent that).
:meth:`TopicService.replay` puts history entries into one queue as its
subscription would have received them.

A subscription may carry a filter policy (SNS's grammar on attributes,
:mod:`dynaq.core.filters`): its queue gets only the messages that match, and a
queue that matches none of a publish gets nothing (and no entry in the
answer). A subscription with ``raw`` off gets each message wrapped in SNS's
JSON envelope ``{"Type": "Notification", "MessageId", "TopicArn", "Topic",
"Subject"?, "Message", "Timestamp", "MessageAttributes"?: {name: {"Type",
"Value"}}}`` (``MessageId`` one per published message, the same in every
queue; ``Timestamp`` ISO 8601; ``Message`` is the body as text, or base64 with
``"MessageEncoding": "base64"`` when it is not UTF-8). An enveloped copy carries
the publish's attributes only inside the envelope, as SNS delivers it (it keeps
dynaq's own ``dynaq.*`` ones); filters read them before enveloping.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from dynaq.core.body_filters import compile_body_policy
from dynaq.core.filters import compile_policy, stored_policies
from dynaq.core.messages import (
    HIDDEN_ATTRIBUTE_PREFIXES,
    SUBJECT_ATTRIBUTE,
    TYPES_ATTRIBUTE,
    NewMessage,
)
from dynaq.errors import QueueNotFound
from dynaq.services.catalog import Catalog, QueueInfo
from dynaq.services.queue_records import Subscription, TopicInfo
from dynaq.services.queues.writes import PreparedWrite, Writer
from dynaq.storage.base import Op, Store

HistorySink = Callable[[str, list[dict[str, Any]]], Awaitable[None]]
"""``(topic, entries)``: keep history entries (the node appends them to the topic's stream)."""


def history_entries(
    messages: Sequence[NewMessage], ids: Sequence[str], published_ms: int
) -> list[dict[str, Any]]:
    """What the history keeps of each message: ``message_id``, ``body`` (base64),
    ``attributes``, ``group`` and ``dedup_id`` when set, and ``published_ms`` (the
    stream's authority stamps it again so that it never decreases)."""
    out: list[dict[str, Any]] = []
    for m, i in zip(messages, ids, strict=True):
        entry: dict[str, Any] = {
            "message_id": i,
            "body": base64.b64encode(m.body).decode(),
            "attributes": dict(m.attributes or {}),
            "published_ms": published_ms,
        }
        if m.group is not None:
            entry["group"] = m.group
        if m.dedup_id is not None:
            entry["dedup_id"] = m.dedup_id
        out.append(entry)
    return out


def message_of(entry: dict[str, Any]) -> tuple[NewMessage, str]:
    """A history entry back as the message that was published, and its message id."""
    return (
        NewMessage(
            base64.b64decode(entry["body"]),
            {str(k): str(v) for k, v in entry.get("attributes", {}).items()} or None,
            entry.get("group"),
            entry.get("dedup_id"),
        ),
        str(entry["message_id"]),
    )


class TopicService:
    """Fanout of published messages to subscribed queues."""

    def __init__(
        self,
        store: Store,
        catalog: Catalog,
        writer: Writer,
        clock_ms: Callable[[], int],
        arn_prefix: str = "arn:aws:sns:us-east-1:000000000000:",
    ) -> None:
        self._arn_prefix = arn_prefix
        self._store = store
        self._catalog = catalog
        self._writer = writer
        self._clock_ms = clock_ms
        # compiled filter policies per (topic, queue), recompiled when the subscription changes
        self._policies: dict[tuple[str, str], tuple[Subscription, _Matches]] = {}
        self.history: HistorySink | None = None
        """Where topics with ``history`` keep what is published (set by the node)."""

    async def publish(
        self,
        topic: str,
        messages: Sequence[NewMessage],
        *,
        with_ops: Sequence[Op] = (),
        message_ids: Sequence[str] | None = None,
        fresh: bool = False,
    ) -> dict[str, list[int]]:
        """Publish ``messages`` to every queue subscribed to ``topic``; return ids per queue.

        ``with_ops`` are written in the same store batch as the copies: all or
        none (a caller's marker that the publish happened). ``message_ids`` name
        the messages in envelopes (SNS's MessageId; drawn here when None).
        ``fresh`` reads the subscriptions and queues from the store instead of
        this node's cache, which may be one config sync behind (for an event
        that must reach a subscription made a moment ago through another node).
        """
        info = await self._catalog.topic(topic, fresh=fresh)
        self._writer.check_batch(messages)
        ids = (
            list(message_ids) if message_ids is not None else [str(uuid.uuid4()) for _ in messages]
        )
        targets: list[tuple[QueueInfo, list[NewMessage]]] = []
        for name in info.queues:
            try:
                q = await self._catalog.queue(name, fresh=fresh)
            except QueueNotFound:
                continue
            copies = self._copies(topic, name, info.subscription(name), messages, ids)
            if copies:
                # The queue's own limits hold for every way in: a FIFO queue's
                # copies need groups, and an envelope must fit the queue's size.
                self._writer.check_for_queue(q, copies)
                targets.append((q, copies))

        async def write() -> list[PreparedWrite]:
            writes: list[PreparedWrite] = []
            async with self._writer.dedup.guard([q for q, _ in targets], messages) as claim:
                for q, copies in targets:
                    writes.append(await self._writer.prepare(q, copies, claim))
                claim.unlock()  # concurrent publishes with other ids share the commit
                ops: list[Op] = [op for w in writes for op in w.ops]
                ops.extend(with_ops)
                if ops:
                    await self._store.write_batch(ops)
            for w in writes:
                self._writer.note_written(w)
            return writes

        writes = await self._writer.run_to_completion(write(), messages)
        if info.history and self.history is not None:
            await self.history(topic, history_entries(messages, ids, self._clock_ms()))
        return {w.info.name: w.ids for w in writes}

    async def replay(self, topic: str, queue: str, entries: Sequence[dict[str, Any]]) -> int:
        """Enqueue history ``entries`` into ``queue`` as its subscription to ``topic``
        takes them (its filter, raw or enveloped; everything, raw, when it is not
        subscribed); return how many were enqueued."""
        info: TopicInfo = await self._catalog.topic(topic, fresh=True)
        q = await self._catalog.queue(queue, fresh=True)
        pairs = [message_of(dict(e)) for e in entries]
        messages = [m for m, _ in pairs]
        copies = self._copies(
            topic, queue, info.subscription(queue), messages, [i for _, i in pairs]
        )
        if copies:
            await self._writer.write(q, copies)
        return len(copies)

    def _copies(
        self,
        topic: str,
        queue: str,
        sub: Subscription,
        messages: Sequence[NewMessage],
        ids: Sequence[str],
    ) -> list[NewMessage]:
        """What one subscription receives of ``messages``: the matching ones, enveloped
        unless the subscription is raw."""
        picked = list(zip(messages, ids, strict=True))
        if sub.filter_policy is not None:
            matches = self._policies.get((topic, queue))
            if matches is None or matches[0] != sub:
                matches = (sub, _matcher(sub))
                self._policies[topic, queue] = matches
            picked = [(m, i) for m, i in picked if matches[1](m)]
        if sub.raw:
            return [m for m, _ in picked]
        now_ms = self._clock_ms()
        arn = self._arn_prefix + topic
        return [
            replace(m, body=_envelope(topic, arn, i, m, now_ms), attributes=_internal(m))
            for m, i in picked
        ]


_Matches = Callable[[NewMessage], bool]


def _matcher(sub: Subscription) -> _Matches:
    """The subscription's filter over a whole message: its attributes, or its body.
    A stored policy was checked when it was set, under the limits of that time."""
    with stored_policies():
        if sub.filter_scope == "body":
            on_body = compile_body_policy(sub.filter_policy)
            return lambda m: on_body(m.body)
        on_attributes = compile_policy(sub.filter_policy)
    return lambda m: on_attributes(m.attributes)


def _internal(m: NewMessage) -> dict[str, str] | None:
    """What an enveloped copy keeps as attributes: dynaq's own (``dynaq.*``) only; the
    publish's attributes (and its Subject) travel inside the envelope, as on SNS."""
    kept = {k: v for k, v in (m.attributes or {}).items() if k.startswith("dynaq.")}
    return kept or None


def _envelope(topic: str, arn: str, message_id: str, m: NewMessage, now_ms: int) -> bytes:
    attrs = m.attributes or {}
    out: dict[str, object] = {
        "Type": "Notification",
        "MessageId": message_id,
        "TopicArn": arn,
        "Topic": topic,
    }
    if SUBJECT_ATTRIBUTE in attrs:
        out["Subject"] = attrs[SUBJECT_ATTRIBUTE]
    try:
        out["Message"] = m.body.decode()
    except UnicodeDecodeError:
        out["Message"] = base64.b64encode(m.body).decode()
        out["MessageEncoding"] = "base64"
    when = datetime.fromtimestamp(now_ms / 1000, UTC)
    out["Timestamp"] = when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now_ms % 1000:03d}Z"
    try:
        types = json.loads(attrs.get(TYPES_ATTRIBUTE, "{}"))
    except ValueError:
        types = {}
    shown = {
        k: {
            "Type": str(types.get(k, "String")) if isinstance(types, dict) else "String",
            "Value": v,
        }
        for k, v in attrs.items()
        if not k.startswith(HIDDEN_ATTRIBUTE_PREFIXES)
    }
    if shown:  # as SNS: no MessageAttributes member for a publish that had none
        out["MessageAttributes"] = shown
    return json.dumps(out).encode()
