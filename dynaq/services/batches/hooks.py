"""Where batch tracking meets queues and topics: item acks on delete, completion events."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Protocol

from dynaq.core.batch_items import BATCH_ITEM_ATTRIBUTE, ItemRef, parse_item_id
from dynaq.core.messages import NewMessage
from dynaq.errors import DynaqError
from dynaq.services.batches.records import Completion, CompletionListener
from dynaq.services.catalog import QueueInfo
from dynaq.services.queues import DeleteListener
from dynaq.services.topics import TopicService

log = logging.getLogger(__name__)


class ItemAcks(Protocol):
    """What acking on delete needs of the batch service (keeps this module off the facade)."""

    async def ack(self, refs: Sequence[ItemRef]) -> list[Completion]: ...


def batch_acks(batches: ItemAcks) -> DeleteListener:
    """A queue delete listener: every deleted message with a batch item id acks that item.

    Runs after the delete is durable. A failed ack (the batch was deleted or
    reaped, the store is briefly down) is logged and does not fail the delete:
    the message is gone either way, and acks are idempotent.
    """

    async def on_deleted(info: QueueInfo, deleted: list[tuple[int, dict[str, str]]]) -> None:
        refs: list[ItemRef] = []
        for message_id, attributes in deleted:
            item = attributes.get(BATCH_ITEM_ATTRIBUTE)
            if item is not None:
                try:
                    refs.append(parse_item_id(item))
                except DynaqError:
                    log.warning("message %s has a malformed batch item id", message_id)
        if not refs:
            return
        try:
            await batches.ack(refs)
        except DynaqError as exc:
            log.warning(
                "batch item acks on delete failed",
                extra={"queue": info.name, "items": len(refs), "error": str(exc)},
            )

    return on_deleted


def completion_publisher(topics: TopicService, topic: str) -> CompletionListener:
    """Publish ``{batchId, userKey, completedAt}`` (JSON) to ``topic`` for every completion."""

    async def publish(done: Completion) -> None:
        body = json.dumps(
            {"batchId": done.batch_id, "userKey": done.user_key, "completedAt": done.completed_ms}
        ).encode()
        await topics.publish(
            topic,
            [
                NewMessage(
                    body,
                    {"dynaq.event": "batch_completed"},
                    # A retried publish of the same completion is stored once.
                    dedup_id=f"batch-completed:{done.batch_id}",
                )
            ],
        )

    return publish
