"""Where batch tracking meets queues and topics: item acks on delete, completion events."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from dynaq.core import keys
from dynaq.core.batch_items import BATCH_ITEM_ATTRIBUTE, ItemRef, parse_item_id
from dynaq.core.messages import NewMessage
from dynaq.errors import (
    BatchNotFound,
    DynaqError,
    InvalidInput,
    NotFound,
    StorageUnavailable,
)
from dynaq.services.batches.records import Completion, CompletionListener
from dynaq.services.catalog import QueueInfo
from dynaq.services.queues.dead_letters import FailureListener
from dynaq.services.queues.service import BeforeDelete
from dynaq.services.topics import TopicService
from dynaq.storage.base import Put, Store

log = logging.getLogger(__name__)


class ItemAcks(Protocol):
    """What acking on delete needs of the batch service (keeps this module off the facade)."""

    async def ack(self, refs: Sequence[ItemRef]) -> list[Completion]: ...


class ItemFailures(Protocol):
    """What failing items on dead-lettering needs of the batch service."""

    async def fail(self, failures: Sequence[tuple[ItemRef, str, dict[str, Any]]]) -> None: ...


def batch_failures(batches: ItemFailures) -> FailureListener:
    """A dead-letter and retention listener: every dead-lettered or expired message
    with a batch item id fails that item (``reason`` says which) (recorded, listed by the batch's description as ``failedItems``, and
    settled so the batch still completes).

    Runs before the move; if recording fails for a reason that may pass, the
    move waits for a later receive. An item whose batch is gone is logged and
    skipped, so it never keeps its message from moving.
    """

    async def before_move(
        info: QueueInfo, doomed: list[tuple[int, dict[str, str]]], reason: str
    ) -> None:
        by_batch: dict[int, list[tuple[ItemRef, str, dict[str, Any]]]] = {}
        for message_id, attributes in doomed:
            item = attributes.get(BATCH_ITEM_ATTRIBUTE)
            if item is None:
                continue
            try:
                ref = parse_item_id(item)
            except DynaqError:
                log.warning("message %s has a malformed batch item id", message_id)
                continue
            detail = {"queue": info.name, "messageId": str(message_id), "reason": reason}
            by_batch.setdefault(ref.batch_id, []).append((ref, item, detail))
        for failures in by_batch.values():
            try:
                await batches.fail(failures)
            except (NotFound, InvalidInput) as exc:
                log.warning(
                    "a dead-lettered message's batch item cannot be failed",
                    extra={"batch_id": failures[0][0].batch_id, "error": str(exc)},
                )

    return before_move


def batch_acks(batches: ItemAcks) -> BeforeDelete:
    """A queue delete listener: every message deleted with a batch item id acks that item.

    Runs *before* the delete (:class:`~dynaq.services.queues.service.BeforeDelete`):
    an acknowledged delete implies its item was acked. Exact acks are
    idempotent, so the ack of a delete that is retried, or of a message
    already deleted elsewhere, changes nothing. If an ack fails for a reason
    that may pass (the store, a conflict, a cancellation), the delete fails
    with a retriable :class:`~dynaq.errors.StorageUnavailable` (503) and
    deletes nothing. An item that can never be acked (its batch was deleted or
    reaped, or its id names no block or an index beyond it) does not hold its
    message hostage: it is logged and the delete goes ahead.
    """

    async def before_delete(info: QueueInfo, doomed: list[tuple[int, dict[str, str]]]) -> None:
        by_batch: dict[int, list[ItemRef]] = {}
        for message_id, attributes in doomed:
            item = attributes.get(BATCH_ITEM_ATTRIBUTE)
            if item is not None:
                try:
                    ref = parse_item_id(item)
                except DynaqError:
                    log.warning("message %s has a malformed batch item id", message_id)
                    continue
                by_batch.setdefault(ref.batch_id, []).append(ref)
        if not by_batch:
            return
        # One call per batch: a batch that is gone must not fail the acks of others.
        results = await asyncio.gather(
            *(_ack(batches, refs) for refs in by_batch.values()), return_exceptions=True
        )
        for result in results:
            if isinstance(result, DynaqError):
                raise StorageUnavailable(
                    f"acking the messages' batch items failed ({result.message}); "
                    "nothing was deleted: retry the delete"
                ) from result
            if isinstance(result, BaseException):
                raise result

    return BeforeDelete(before_delete)


async def _ack(batches: ItemAcks, refs: list[ItemRef]) -> None:
    """Ack one batch's items; items that can never be acked are logged and skipped."""
    try:
        await batches.ack(refs)
        return
    except (NotFound, InvalidInput) as exc:
        if len(refs) == 1:
            log.warning(
                "a deleted message's batch item cannot be acked",
                extra={"batch_id": refs[0].batch_id, "error": str(exc)},
            )
            return
    # One bad id refuses the whole request: ack the items one by one.
    for ref in refs:
        await _ack(batches, [ref])


class CompletionClaims(Protocol):
    """What publishing a completion once needs of the batch service."""

    async def claim_completion_event(self, batch_id: int, for_s: float) -> bool: ...


CLAIM_S = 15.0
"""How long a node may take to publish a completion event before another may."""


def completion_publisher(
    store: Store, topics: TopicService, topic: str, claims: CompletionClaims
) -> CompletionListener:
    """Publish ``{batchId, userKey, completedAt}`` (JSON) to ``topic`` once per completion.

    Several deliveries of one completion can run at once: the flipping node's
    relay, a restarted node delivering what it left, the reaper. Each first
    claims the publish on the batch's header (one claimant at a time, see
    :meth:`~dynaq.services.batches.service.BatchService.claim_completion_event`;
    the others fail retriably and retry), and the event's copies and a
    published marker are one store batch; a delivery that finds the marker
    publishes nothing. So the event is published once, whatever the clocks
    did meanwhile (the dedup id alone holds only within the dedup window), unless a
    claimant stalls longer than :data:`CLAIM_S` between its claim and its write.
    The subscriptions are read from the store, not this node's cache: a queue
    subscribed a moment ago through another node gets the event.
    """

    async def publish(done: Completion) -> None:
        marker = keys.batch_published(done.batch_id)
        if await store.get(marker) is not None:
            return
        try:
            if not await claims.claim_completion_event(done.batch_id, CLAIM_S):
                raise StorageUnavailable(
                    "another node is publishing this batch's completion event; retrying"
                )
        except BatchNotFound:
            pass  # deleted since it completed: its event is still due, and nobody races it
        if await store.get(marker) is not None:
            return  # published under a claim that ran out
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
            with_ops=[Put(marker, b"")],
            fresh=True,
        )

    return publish
