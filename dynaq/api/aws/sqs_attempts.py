"""``ReceiveRequestAttemptId`` on FIFO queues: a ``ReceiveMessage`` retried with the
same attempt id (a lost answer, a timeout) gets the messages the first call
received, with the same receipt handles and their visibility timeout started
again, instead of finding them invisible for the whole timeout.

As on SQS: the attempt id lasts 5 minutes; a retry is answered from it only
while every message it received is still in flight under that delivery (none
deleted, none with its visibility changed and served again), otherwise the
retry is a new receive; standard queues ignore the parameter. The record is kept
by the node (the worker) that answered the first call, in memory, bounded in
entries and bytes (the oldest go first): a retry that reaches another node, or
one after a restart, is a new receive, which only costs the messages their
visibility timeout, as without an attempt id.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dynaq.api.aws.sqs_validation import check_id
from dynaq.core.messages import Message
from dynaq.services.catalog import QueueInfo
from dynaq.services.queues.receipts import ReceiptActions

ATTEMPT_WINDOW_S = 300.0
"""How long an attempt id is remembered (SQS's 5-minute deduplication interval)."""

AttemptKey = tuple[int, str, str]
"""Queue number, the signing key's id ("" unsigned), the attempt id."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """What a receive with an attempt id answered."""

    at: float
    messages: list[Message]
    visibility_timeout_s: float | None
    """The call's own timeout (None: the queue's)."""


class ReceiveAttempts:
    """Recent receives by attempt id (not thread-safe: one event loop uses it)."""

    def __init__(self, max_entries: int = 10_000, max_bytes: int = 64 * 1024 * 1024) -> None:
        self._entries: OrderedDict[AttemptKey, Attempt] = OrderedDict()
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: AttemptKey, now: float) -> Attempt | None:
        """The attempt under ``key`` if it is younger than the window."""
        self._expire(now)
        return self._entries.get(key)

    def put(self, key: AttemptKey, attempt: Attempt) -> None:
        self.forget(key)
        self._entries[key] = attempt
        self._bytes += _size(attempt)
        while self._entries and (
            len(self._entries) > self._max_entries or self._bytes > self._max_bytes
        ):
            _, oldest = self._entries.popitem(last=False)
            self._bytes -= _size(oldest)

    def forget(self, key: AttemptKey) -> None:
        gone = self._entries.pop(key, None)
        if gone is not None:
            self._bytes -= _size(gone)

    def _expire(self, now: float) -> None:
        while self._entries:
            key, first = next(iter(self._entries.items()))
            if now - first.at < ATTEMPT_WINDOW_S:
                return
            self.forget(key)


def _size(attempt: Attempt) -> int:
    return sum(len(m.body) + 64 for m in attempt.messages)


def attempt_key(
    params: Mapping[str, Any], key_id: str | None, info: QueueInfo
) -> AttemptKey | None:
    """The ``ReceiveRequestAttemptId`` of a receive on a FIFO queue (checked as SQS
    checks it), with who signed it; ``None`` when there is none or the queue is
    standard (SQS ignores it there)."""
    value = params.get("ReceiveRequestAttemptId")
    if value is None or not info.settings.fifo:
        return None
    return info.number, key_id or "", check_id("ReceiveRequestAttemptId", value)


async def replay(
    attempts: ReceiveAttempts,
    now: float,
    receipts: ReceiptActions,
    info: QueueInfo,
    key: AttemptKey,
) -> list[Message] | None:
    """The messages an earlier receive with this attempt id got, their visibility
    timeout started again, if all of them are still in flight under that receive;
    else ``None`` (a new receive)."""
    prior = attempts.get(key, now)
    if prior is None:
        return None
    vt = prior.visibility_timeout_s
    pairs = [(m.id, m.delivery) for m in prior.messages]
    changed, stale = await receipts.change_visibility(
        info, pairs, info.settings.visibility_timeout_s if vt is None else vt
    )
    if stale or len(changed) != len(pairs):
        attempts.forget(key)
        return None
    return prior.messages
