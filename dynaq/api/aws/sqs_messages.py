"""SQS message actions on dynaq queues: send, receive, delete, change visibility
(single and batch); message-move tasks are in :mod:`.sqs_move_tasks`.

* Receipt handles are dynaq receipts: a delete or visibility change acts only on
  the delivery it names (:mod:`dynaq.services.queues.receipts`); a delete with a
  handle from an earlier delivery succeeds without deleting the newer one, a
  visibility change with it fails as AWS's does.
* FIFO queues (``.fifo``) map MessageGroupId onto dynaq groups (one in flight per
  group, in order) and MessageDeduplicationId (or, with content-based
  deduplication, the body's SHA-256) onto dedup ids, within dynaq's dedup window
  (5 minutes by default, as SQS). On a standard queue a MessageDeduplicationId
  is refused with AWS's InvalidParameterValue (per entry in a batch), and a
  MessageGroupId is accepted and carries no order (AWS's fair queues).
* A body outside SQS's characters (XML 1.0's) is refused with
  InvalidMessageContents, as SQS refuses it.
* Message attributes keep their data types; MD5OfMessageBody and
  MD5OfMessageAttributes are computed as SQS does, so SDKs verify them. Names,
  types, values, group and dedup ids are checked as AWS checks them
  (:mod:`.sqs_validation`); a receive never fails on what another API stored.
* SendMessageBatch fails a bad entry on its own (in ``Failed``); a request whose
  bodies and attributes together exceed the node's largest message is
  BatchRequestTooLong, as on AWS.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from dynaq.api.aws.sqs import SQS, Call, action
from dynaq.api.aws.sqs_attempts import Attempt, attempt_key, replay
from dynaq.api.aws.sqs_queues import queue_of
from dynaq.api.aws.sqs_validation import (
    NOT_ALLOWED,
    QUEUE_ATTRIBUTES,
    SYSTEM_ATTRIBUTE_NAMES,
    check_id,
    check_system_attributes,
    int_param,
    payload_size,
)
from dynaq.api.aws.sqs_wire import (
    SqsError,
    attributes_md5,
    from_dynaq_attributes,
    invalid,
    md5_hex,
    missing,
    to_dynaq_attributes,
    wire_attributes,
)
from dynaq.api.codec import caller_waiting
from dynaq.api.keys import QUEUES
from dynaq.core.access import READ, WRITE
from dynaq.core.messages import Message, NewMessage
from dynaq.core.receipts import decode_receipt, encode_receipt
from dynaq.errors import DynaqError, InvalidInput
from dynaq.services.catalog import QueueInfo

MAX_BATCH = 10
_ENTRY_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")
_SYSTEM = ("ApproximateReceiveCount", "SentTimestamp", "ApproximateFirstReceiveTimestamp",
           "MessageGroupId", "SenderId")  # fmt: skip


def _check_contents(body: str) -> None:
    """Refuse what SQS refuses, with its code: a body outside the allowed characters
    (XML 1.0's) would break clients that parse replies as XML, on SQS and here alike."""
    bad = NOT_ALLOWED.search(body)
    if bad is not None:
        raise SqsError(
            "InvalidMessageContents",
            f"Invalid binary character '#x{ord(bad.group()):X}' was found in the message "
            "body, the set of allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF | "
            "#xE000 to #xFFFD | #x10000 to #x10FFFF",
        )


def max_bytes(call: Call, info: QueueInfo) -> int:
    """The largest message ``info`` takes here: its MaximumMessageSize, bounded by the
    node's ``http.max_message_bytes`` (the write path refuses more, whatever the
    queue says)."""
    return min(info.settings.max_message_bytes, call.request.app[QUEUES].limits.max_message_bytes)


def _new_message(info: QueueInfo, p: dict[str, Any], limit: int) -> tuple[NewMessage, str | None]:
    """One SendMessage's parameters → a dynaq message and its attributes' MD5."""
    body = p.get("MessageBody")
    if body is None or body == "":
        raise missing("MessageBody")
    if not isinstance(body, str):
        raise invalid("Value for parameter MessageBody is invalid. Reason: must be a string.")
    _check_contents(body)
    attrs, shaped = to_dynaq_attributes(p.get("MessageAttributes"))
    check_system_attributes(p.get("MessageSystemAttributes"))
    raw = body.encode()
    if payload_size(p) > limit:
        raise invalid(
            "One or more parameters are invalid. Reason: Message must be shorter than "
            f"{limit} bytes."
        )
    delay = p.get("DelaySeconds")
    group = p.get("MessageGroupId")
    dedup = p.get("MessageDeduplicationId")
    if group is not None:
        check_id("MessageGroupId", group)
    if dedup is not None:
        check_id("MessageDeduplicationId", dedup)
    if info.settings.fifo:
        if group is None:
            raise missing("MessageGroupId")
        if delay not in (None, 0) or isinstance(delay, bool):
            raise invalid("Value for parameter DelaySeconds is invalid. Reason: The request "
                          "include parameter that is not valid for this queue type.")  # fmt: skip
        if dedup is None and info.settings.content_based_dedup:
            dedup = hashlib.sha256(raw).hexdigest()
        if dedup is None:
            raise invalid("The queue should either have ContentBasedDeduplication enabled or "
                          "MessageDeduplicationId provided explicitly")  # fmt: skip
    else:
        if dedup is not None:
            # As AWS answers: silently dropping it would let a sender believe its
            # retries are deduplicated on a queue that delivers every copy.
            raise invalid(
                f"Value {dedup} for parameter MessageDeduplicationId is invalid. Reason: "
                "The request include parameter that is not valid for this queue type."
            )
        group = None  # standard queues: MessageGroupId only tags fair queues on AWS
    if delay is not None:
        int_param("DelaySeconds", delay, 0, 900, "DelaySeconds must be >= 0 and <= 900.")
    message = NewMessage(
        raw, attrs or None, group, dedup, delay_s=None if delay is None else float(delay)
    )
    return message, attributes_md5(shaped) if shaped else None


def _sent(mid: int, message: NewMessage, attrs_md5: str | None, fifo: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"MessageId": str(mid), "MD5OfMessageBody": md5_hex(message.body)}
    if attrs_md5 is not None:
        out["MD5OfMessageAttributes"] = attrs_md5
    if fifo:
        out["SequenceNumber"] = str(mid)
    return out


@action("SendMessage")
async def send_message(call: Call) -> dict[str, Any]:
    info = await queue_of(call, WRITE)
    message, attrs_md5 = _new_message(info, call.params, max_bytes(call, info))
    [mid] = await call.request.app[QUEUES].enqueue(info, [message])
    return _sent(mid, message, attrs_md5, info.settings.fifo)


def _entries(call: Call) -> list[dict[str, Any]]:
    entries = call.params.get("Entries")
    if not isinstance(entries, list) or not entries:
        raise SqsError("EmptyBatchRequest", "There should be at least one entry in the request.",
                       query_code="AWS.SimpleQueueService.EmptyBatchRequest")  # fmt: skip
    if len(entries) > MAX_BATCH:
        raise SqsError("TooManyEntriesInBatchRequest",
                       f"Maximum number of entries per request are {MAX_BATCH}. You have sent {len(entries)}.",
                       query_code="AWS.SimpleQueueService.TooManyEntriesInBatchRequest")  # fmt: skip
    ids = [e.get("Id") if isinstance(e, dict) else None for e in entries]
    for i in ids:
        if not isinstance(i, str) or not _ENTRY_ID.fullmatch(i):
            raise SqsError("InvalidBatchEntryId", "A batch entry id can only contain alphanumeric "
                           "characters, hyphens and underscores. It can be at most 80 letters long.",
                           query_code="AWS.SimpleQueueService.InvalidBatchEntryId")  # fmt: skip
    if len(set(ids)) != len(ids):
        raise SqsError("BatchEntryIdsNotDistinct", "Two or more batch entries in the request have the same Id.",
                       query_code="AWS.SimpleQueueService.BatchEntryIdsNotDistinct")  # fmt: skip
    return entries


def _failed(entry_id: str, exc: SqsError | DynaqError) -> dict[str, Any]:
    if isinstance(exc, SqsError):
        return {
            "Id": entry_id,
            "SenderFault": exc.status < 500,
            "Code": exc.code,
            "Message": exc.message,
        }
    return {"Id": entry_id, "SenderFault": exc.status < 500, "Code": "InvalidParameterValue",
            "Message": exc.message}  # fmt: skip


@action("SendMessageBatch")
async def send_message_batch(call: Call) -> dict[str, Any]:
    """Each entry is checked on its own (a bad one is in ``Failed``, the others are
    sent); the request as a whole holds at most the node's largest message (bodies
    and attributes together, as AWS counts them), else BatchRequestTooLong."""
    info = await queue_of(call, WRITE)
    entries = _entries(call)
    node_limit = call.request.app[QUEUES].limits.max_message_bytes
    total = sum(payload_size(e) for e in entries)
    if total > node_limit:
        raise SqsError("BatchRequestTooLong", f"Batch requests cannot be longer than {node_limit} "
                       f"bytes. You have sent {total} bytes.",
                       query_code="AWS.SimpleQueueService.BatchRequestTooLong")  # fmt: skip
    limit = max_bytes(call, info)
    good: list[tuple[str, NewMessage, str | None]] = []
    failed: list[dict[str, Any]] = []
    for e in entries:
        try:
            message, attrs_md5 = _new_message(info, e, limit)
        except (SqsError, InvalidInput) as exc:
            failed.append(_failed(e["Id"], exc))
            continue
        good.append((e["Id"], message, attrs_md5))
    ok: list[dict[str, Any]] = []
    if good:
        ids = await call.request.app[QUEUES].enqueue(info, [m for _, m, _ in good])
        for (entry_id, m, md5), mid in zip(good, ids, strict=True):
            ok.append({"Id": entry_id, **_sent(mid, m, md5, info.settings.fifo)})
    return {"Successful": ok, "Failed": failed}


def _received(
    m: Message, info: QueueInfo, system: list[str], wanted: list[str] | None
) -> dict[str, Any]:
    body = m.body.decode("utf-8", errors="replace")
    out: dict[str, Any] = {
        "MessageId": str(m.id),
        "ReceiptHandle": _receipt_of(m),
        "MD5OfBody": md5_hex(body.encode()),
        "Body": body,
    }
    if system:
        every = "All" in system
        attrs = {
            "ApproximateReceiveCount": str(m.receive_count),
            "SentTimestamp": str(m.enqueued_ms),
            # As far as this node knows: since a restart or a handover, the send time.
            "ApproximateFirstReceiveTimestamp": str(m.first_received_ms or m.enqueued_ms),
            "SenderId": "dynaq",
        }
        if m.group is not None:
            attrs["MessageGroupId"] = m.group
        if info.settings.fifo:
            attrs["SequenceNumber"] = str(m.id)
        picked = {k: v for k, v in attrs.items() if every or k in system}
        if picked:
            out["Attributes"] = picked
    shaped = from_dynaq_attributes(m.attributes, wanted)
    if shaped:
        out["MessageAttributes"] = wire_attributes(shaped)
        out["MD5OfMessageAttributes"] = attributes_md5(shaped)
    return out


def _receipt_of(m: Message) -> str:
    return encode_receipt(m.id, m.delivery)


def _names(value: object, what: str, known: frozenset[str] | None = None) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise invalid(f"{what} must be a list of strings.")
    unknown = [] if known is None else [v for v in value if v not in known]
    if unknown:
        raise SqsError("InvalidAttributeName", f"Unknown Attribute {unknown[0]}.")
    return list(value)


@action("ReceiveMessage")
async def receive_message(call: Call) -> dict[str, Any]:
    info = await queue_of(call, READ)
    p = call.params
    n = int_param("MaxNumberOfMessages", p.get("MaxNumberOfMessages", 1), 1, MAX_BATCH)
    vt = p.get("VisibilityTimeout")
    if vt is not None:
        int_param("VisibilityTimeout", vt, 0, 43_200)
    wait = p.get("WaitTimeSeconds")
    if wait is not None:
        int_param("WaitTimeSeconds", wait, 0, 20, "Must be >= 0 and <= 20, if provided.")
    system = _names(
        p.get("MessageSystemAttributeNames"), "MessageSystemAttributeNames", SYSTEM_ATTRIBUTE_NAMES
    )
    # AttributeNames (deprecated) is modeled as queue attribute names; SDKs send the
    # message system attribute names in it too.
    system += _names(
        p.get("AttributeNames"), "AttributeNames", SYSTEM_ATTRIBUTE_NAMES | QUEUE_ATTRIBUTES
    )
    wanted = _names(p.get("MessageAttributeNames"), "MessageAttributeNames")
    timeout = None if vt is None else float(vt)
    settings = call.request.app[SQS]
    attempt = attempt_key(call.params, None if call.key is None else call.key.key_id, info)
    messages = None
    if attempt is not None:
        receipts = call.request.app[QUEUES].receipts
        now = settings.clock.monotonic()
        messages = await replay(settings.attempts, now, receipts, info, attempt)
    if messages is None:
        messages = await call.request.app[QUEUES].receive(
            info.name,
            n,
            timeout,
            info.settings.receive_wait_s if wait is None else float(wait),
            caller_waiting(call.request),
            # SQS may return several messages of one group together, in order.
            per_group=n if info.settings.fifo else 1,
        )
        if attempt is not None and messages:
            now = settings.clock.monotonic()
            settings.attempts.put(attempt, Attempt(now, messages, timeout))
    if not messages:
        return {}
    return {"Messages": [_received(m, info, system, wanted) for m in messages]}


def _handle(value: object) -> tuple[int, int]:
    if not isinstance(value, str) or not value:
        raise missing("ReceiptHandle")
    try:
        return decode_receipt(value)
    except InvalidInput:
        raise SqsError("ReceiptHandleIsInvalid", f'The input receipt handle "{value}" is not a valid receipt handle.',
                       query_code="ReceiptHandleIsInvalid") from None  # fmt: skip


@action("DeleteMessage")
async def delete_message(call: Call) -> dict[str, Any]:
    info = await queue_of(call, WRITE)
    pair = _handle(call.params.get("ReceiptHandle"))
    await call.request.app[QUEUES].receipts.delete(info, [pair])
    return {}


@action("DeleteMessageBatch")
async def delete_message_batch(call: Call) -> dict[str, Any]:
    info = await queue_of(call, WRITE)
    ok: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    pairs: list[tuple[str, tuple[int, int]]] = []
    for e in _entries(call):
        try:
            pairs.append((e["Id"], _handle(e.get("ReceiptHandle"))))
        except SqsError as exc:
            failed.append(_failed(e["Id"], exc))
    if pairs:
        await call.request.app[QUEUES].receipts.delete(info, [p for _, p in pairs])
        ok = [{"Id": entry_id} for entry_id, _ in pairs]
    return {"Successful": ok, "Failed": failed}


def _not_in_flight(handle: str) -> SqsError:
    return invalid(f"Value {handle} for parameter ReceiptHandle is invalid. Reason: "
                   "Message does not exist or is not available for visibility timeout change.")  # fmt: skip


def _timeout(value: object) -> float:
    if value is None:
        raise missing("VisibilityTimeout")
    return float(int_param("VisibilityTimeout", value, 0, 43_200))


@action("ChangeMessageVisibility")
async def change_message_visibility(call: Call) -> dict[str, Any]:
    info = await queue_of(call, WRITE)
    handle = call.params.get("ReceiptHandle")
    pair = _handle(handle)
    vt = _timeout(call.params.get("VisibilityTimeout"))
    changed, _ = await call.request.app[QUEUES].receipts.change_visibility(info, [pair], vt)
    if not changed:
        raise _not_in_flight(str(handle))
    return {}


@action("ChangeMessageVisibilityBatch")
async def change_message_visibility_batch(call: Call) -> dict[str, Any]:
    info = await queue_of(call, WRITE)
    ok: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for e in _entries(call):
        try:
            pair = _handle(e.get("ReceiptHandle"))
            vt = _timeout(e.get("VisibilityTimeout"))
            changed, _ = await call.request.app[QUEUES].receipts.change_visibility(info, [pair], vt)
            if not changed:
                raise _not_in_flight(str(e.get("ReceiptHandle")))
            ok.append({"Id": e["Id"]})
        except SqsError as exc:
            failed.append(_failed(e["Id"], exc))
    return {"Successful": ok, "Failed": failed}
