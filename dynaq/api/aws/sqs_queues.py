"""SQS queue actions on dynaq queues: create, find, list, delete, attributes, purge,
tags, dead-letter sources.

SQS attributes map onto dynaq's queue settings one to one (VisibilityTimeout →
``visibility_timeout_s``, DelaySeconds → ``delay_s``, MessageRetentionPeriod →
``retention_s``, MaximumMessageSize → ``max_message_bytes``,
ReceiveMessageWaitTimeSeconds → ``receive_wait_s``, RedrivePolicy →
``redrive_policy``, FifoQueue → ``fifo``, ContentBasedDeduplication →
``content_based_dedup``); the approximate counts are the ring-wide
statistics of ``GET /v2/queues/{queue}``.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from dynaq.api.aws.sqs import SQS, Call, action
from dynaq.api.aws.sqs_validation import check_tags, int_attribute, int_param, is_int
from dynaq.api.aws.sqs_wire import (
    SqsError,
    invalid,
    missing,
    name_of_arn,
    name_of_url,
    queue_arn,
    queue_url,
)
from dynaq.api.codec import parse_json
from dynaq.api.keys import CATALOG, QUEUES
from dynaq.core.access import ADMIN, READ, WRITE
from dynaq.errors import AlreadyExists, Conflict, InvalidInput
from dynaq.services.catalog import QueueInfo
from dynaq.services.queue_records import MAX_RECEIVE_COUNT, QueueSettings, RedrivePolicy

_SETTABLE = {
    "VisibilityTimeout": ("visibility_timeout_s", 0, 43_200),
    "DelaySeconds": ("delay_s", 0, 900),
    "MessageRetentionPeriod": ("retention_s", 60, 1_209_600),
    "MaximumMessageSize": ("max_message_bytes", 1024, 1 << 20),
    "ReceiveMessageWaitTimeSeconds": ("receive_wait_s", 0, 20),
}
"""SQS attribute → (dynaq setting, AWS's range); every one an integer string."""
_ACCEPTED_UNUSED = {"Policy", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds",
                    "SqsManagedSseEnabled", "RedriveAllowPolicy"}  # fmt: skip
"""Taken and ignored: IAM policies and encryption at rest have no dynaq
equivalent (the README says so)."""
_FIFO_MODES = {
    "DeduplicationScope": ("queue",),
    "FifoThroughputLimit": ("perQueue", "perMessageGroupId"),
}
"""FIFO modes and the values dynaq keeps: it deduplicates per queue, so
``DeduplicationScope=messageGroup`` (the same dedup id in two groups stands for two
messages) is refused rather than taken and then dropping the second message.
Either throughput limit describes dynaq (it has no per-queue FIFO cap)."""
_MAX_LIST = 1000
_DIGITS = re.compile(r"[0-9]{1,12}")
_SQS_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")
_SQS_FIFO_NAME = re.compile(r"[A-Za-z0-9_-]{1,75}\.fifo")


def _bool(name: str, value: object) -> bool:
    if not isinstance(value, str) or value.lower() not in ("true", "false"):
        raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
    return value.lower() == "true"


def settings_changes(attrs: object, creating_fifo: bool | None) -> dict[str, Any]:
    """SQS attributes → dynaq setting changes (``creating_fifo``: None when setting
    attributes of an existing queue, where FifoQueue cannot change)."""
    if attrs is None:
        return {}
    if not isinstance(attrs, dict):
        raise invalid("Attributes must be a map.")
    changes: dict[str, Any] = {}
    for name, value in attrs.items():
        if name in _SETTABLE:
            field, lo, hi = _SETTABLE[name]
            n = int_attribute(name, value, lo, hi)
            changes[field] = n if field == "max_message_bytes" else float(n)
        elif name == "RedrivePolicy":
            changes["redrive_policy"] = _redrive(value)
        elif name == "FifoQueue":
            if creating_fifo is None:
                raise SqsError("InvalidAttributeName", "FifoQueue is set only at creation.")
            changes["fifo"] = _bool(name, value)
        elif name == "ContentBasedDeduplication":
            changes["content_based_dedup"] = _bool(name, value)
        elif name in _FIFO_MODES:
            if creating_fifo is False:
                raise SqsError("InvalidAttributeName", f"{name} is for FIFO queues only.")
            if value not in _FIFO_MODES[name]:
                raise SqsError(
                    "InvalidAttributeValue",
                    f"Invalid value for the parameter {name}: dynaq takes "
                    f"{' or '.join(_FIFO_MODES[name])} (it deduplicates per queue).",
                )
        elif name not in _ACCEPTED_UNUSED:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
    return changes


def _redrive(value: object) -> RedrivePolicy | None:
    """A RedrivePolicy: JSON with a deadLetterTargetArn and a maxReceiveCount that is
    an integer 1..1000 (a JSON number or a string of digits, as AWS takes it)."""
    if value in ("", None):
        return None
    try:
        rp = parse_json(str(value).encode())
    except (InvalidInput, ValueError):
        rp = None
    count: object = rp.get("maxReceiveCount") if isinstance(rp, dict) else None
    if isinstance(count, str) and _DIGITS.fullmatch(count):
        count = int(count)
    if isinstance(rp, dict) and is_int(count) and 1 <= count <= MAX_RECEIVE_COUNT:
        return RedrivePolicy(name_of_arn(rp.get("deadLetterTargetArn")), count)
    raise SqsError(
        "InvalidAttributeValue",
        "Invalid value for the parameter RedrivePolicy. Reason: Redrive policy is not a "
        "valid JSON map with a deadLetterTargetArn and a maxReceiveCount between 1 and "
        f"{MAX_RECEIVE_COUNT}.",
    )


def _whole(seconds: float) -> str:
    """A duration setting as SQS shows it: whole seconds. Settings made through dynaq's
    own API may hold fractions; they are rounded to the nearest second (half up), so
    the figure is within half a second of what the queue does (1e-300 shows as 0,
    0.5 as 1) and, the ranges having whole bounds, stays inside AWS's range."""
    if not math.isfinite(seconds):
        return "0"
    return str(math.floor(seconds + 0.5))


def attributes_of(call: Call, info: QueueInfo, stats: dict[str, Any]) -> dict[str, str]:
    s: QueueSettings = info.settings
    node_max_bytes = call.request.app[QUEUES].limits.max_message_bytes
    out = {
        "QueueArn": queue_arn(call.region, info.name),
        "VisibilityTimeout": _whole(s.visibility_timeout_s),
        "DelaySeconds": _whole(s.delay_s),
        "MessageRetentionPeriod": _whole(s.retention_s),
        # The effective limit: the node's http.max_message_bytes bounds every queue.
        "MaximumMessageSize": str(min(s.max_message_bytes, node_max_bytes)),
        "ReceiveMessageWaitTimeSeconds": _whole(s.receive_wait_s),
        "CreatedTimestamp": str(info.created_ms // 1000),
        "LastModifiedTimestamp": str(info.modified_ms // 1000),
        "ApproximateNumberOfMessages": str(stats["visible"]),
        "ApproximateNumberOfMessagesNotVisible": str(stats["in_flight"]),
        "ApproximateNumberOfMessagesDelayed": str(stats["delayed"]),
        "SqsManagedSseEnabled": "false",
    }
    if s.redrive_policy is not None:
        rp = {
            "deadLetterTargetArn": queue_arn(call.region, s.redrive_policy.dead_letter_queue),
            "maxReceiveCount": s.redrive_policy.max_receive_count,
        }
        out["RedrivePolicy"] = json.dumps(rp, separators=(",", ":"))
    if s.fifo:
        out["FifoQueue"] = "true"
        out["ContentBasedDeduplication"] = "true" if s.content_based_dedup else "false"
        out["DeduplicationScope"] = "queue"
        out["FifoThroughputLimit"] = "perQueue"
    return out


def _require_dead_letter_write(call: Call, changes: dict[str, Any]) -> None:
    """A RedrivePolicy makes the queue's failed messages land in its target: the
    caller needs ``write`` there too (``admin`` is on the queue being set)."""
    policy = changes.get("redrive_policy")
    if policy is not None:
        call.require(WRITE, policy.dead_letter_queue)


async def queue_of(call: Call, perm: str) -> QueueInfo:
    name = name_of_url(call.params.get("QueueUrl"))
    call.require(perm, name)
    return await call.request.app[CATALOG].queue(name)


@action("CreateQueue")
async def create_queue(call: Call) -> dict[str, Any]:
    name = call.params.get("QueueName")
    if not isinstance(name, str) or not name:
        raise missing("QueueName")
    call.require(ADMIN, name)
    attrs = call.params.get("Attributes") or {}
    fifo = (
        str(attrs.get("FifoQueue", "false")).lower() == "true" if isinstance(attrs, dict) else False
    )
    if fifo != name.endswith(".fifo") or (fifo and not _SQS_FIFO_NAME.fullmatch(name)):
        raise invalid("The name of a FIFO queue can only include alphanumeric characters, "
                      "hyphens, or underscores, must end with .fifo suffix and be 1 to 80 in length.")  # fmt: skip
    if not fifo and not _SQS_NAME.fullmatch(name):
        # dynaq's own APIs also take dots; SQS's names do not (a client must not create
        # through SQS a queue real SQS would refuse). Existing ones stay reachable.
        raise invalid("Can only include alphanumeric characters, hyphens, or underscores. "
                      "1 to 80 in length")  # fmt: skip
    changes = settings_changes(attrs, fifo)
    _require_dead_letter_write(call, changes)
    catalog = call.request.app[CATALOG]
    tags = call.params.get("tags")
    created = dict(changes)
    if tags is not None and check_tags(tags):
        created["tags"] = tuple(sorted(tags.items()))
    try:
        # One write with every attribute: a send through another node must never
        # find this queue with defaults (a FIFO queue taken for a standard one).
        info = await catalog.create_queue(name, created)
    except AlreadyExists:
        info = await catalog.queue(name)
        current = info.settings
        if any(getattr(current, k) != v for k, v in changes.items()):
            raise SqsError(
                "QueueNameExists",
                f"A queue already exists with the same name and a different value for "
                f"attribute(s) {', '.join(sorted(attrs))}",
                query_code="QueueAlreadyExists",
            ) from None
        return {"QueueUrl": queue_url(call.request, name)}
    except Conflict as exc:
        raise SqsError(
            "QueueDeletedRecently",
            exc.message,
            query_code="AWS.SimpleQueueService.QueueDeletedRecently",
        ) from None
    return {"QueueUrl": queue_url(call.request, info.name)}


@action("GetQueueUrl")
async def get_queue_url(call: Call) -> dict[str, Any]:
    name = call.params.get("QueueName")
    if not isinstance(name, str) or not name:
        raise missing("QueueName")
    call.require(READ, name)
    info = await call.request.app[CATALOG].queue(name)
    return {"QueueUrl": queue_url(call.request, info.name)}


@action("ListQueues")
async def list_queues(call: Call) -> dict[str, Any]:
    prefix = str(call.params.get("QueueNamePrefix") or "")
    limit = call.params.get("MaxResults")
    token = call.params.get("NextToken")
    listed = await call.request.app[CATALOG].listed_queue_names()
    names = [q for q in listed if q.startswith(prefix)]
    page, next_token = _page(names, limit, token)
    out: dict[str, Any] = {"QueueUrls": [queue_url(call.request, q) for q in page]}
    if next_token is not None:
        out["NextToken"] = next_token
    return out


def _page(names: list[str], limit: object, token: object) -> tuple[list[str], str | None]:
    """One page of sorted ``names`` after ``token`` (the last name of the previous
    page) and the token of the next (only when MaxResults is given, as on SQS)."""
    n = _MAX_LIST if limit is None else int_param("MaxResults", limit, 1, _MAX_LIST)
    if token is not None:
        names = [q for q in names if q > str(token)]
    page = names[:n]
    return page, page[-1] if limit is not None and len(names) > n else None


@action("DeleteQueue")
async def delete_queue(call: Call) -> dict[str, Any]:
    info = await queue_of(call, ADMIN)
    await call.request.app[CATALOG].delete_queue(info.name)
    return {}


@action("GetQueueAttributes")
async def get_queue_attributes(call: Call) -> dict[str, Any]:
    info = await queue_of(call, READ)
    wanted = call.params.get("AttributeNames") or []
    if not isinstance(wanted, list):
        raise invalid("AttributeNames must be a list.")
    stats = await call.request.app[QUEUES].ring_stats(info)
    attrs = attributes_of(call, info, stats)
    if "All" in wanted:
        return {"Attributes": attrs}
    known = (
        set(attrs)
        | set(_SETTABLE)
        | {"RedrivePolicy", "FifoQueue", "ContentBasedDeduplication"}
        | _ACCEPTED_UNUSED
        | set(_FIFO_MODES)
    )
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise SqsError("InvalidAttributeName", f"Unknown Attribute {unknown[0]}.")
    picked = {w: attrs[w] for w in wanted if w in attrs}
    return {"Attributes": picked} if picked else {}


@action("SetQueueAttributes")
async def set_queue_attributes(call: Call) -> dict[str, Any]:
    info = await queue_of(call, ADMIN)
    attrs = call.params.get("Attributes")
    if not isinstance(attrs, dict) or not attrs:
        raise missing("Attributes")
    changes = settings_changes(attrs, None)
    _require_dead_letter_write(call, changes)
    if changes:
        await call.request.app[CATALOG].update_queue(info.name, changes)
    return {}


@action("PurgeQueue")
async def purge_queue(call: Call) -> dict[str, Any]:
    """Start the purge task, unless one of this queue started within
    ``purge_interval_s`` (SQS allows one purge per queue every 60 s). Two purges
    asked through two nodes at the same instant may both start: as on SQS, the
    limit protects the queue from repeated purges, not from a race."""
    info = await queue_of(call, ADMIN)
    tasks = call.request.app[QUEUES].tasks
    settings = call.request.app[SQS]
    if settings.purge_interval_s > 0:
        latest = await tasks.list_for(info.name, "purge", limit=1)
        age_ms = settings.clock.wall_ms() - latest[0]["started_at_ms"] if latest else None
        # A negative age (the wall clock stepped back) does not hold the queue.
        if age_ms is not None and 0 <= age_ms < settings.purge_interval_s * 1000:
            raise SqsError(
                "PurgeQueueInProgress",
                f"Only one PurgeQueue operation on {info.name} is allowed every "
                f"{settings.purge_interval_s:g} seconds.",
                status=403,
                query_code="AWS.SimpleQueueService.PurgeQueueInProgress",
            )
    await tasks.start_purge(info)
    return {}


@action("ListDeadLetterSourceQueues")
async def list_dead_letter_sources(call: Call) -> dict[str, Any]:
    info = await queue_of(call, READ)
    names = await call.request.app[CATALOG].dead_letter_sources(info.name)
    page, next_token = _page(names, call.params.get("MaxResults"), call.params.get("NextToken"))
    out: dict[str, Any] = {"queueUrls": [queue_url(call.request, q) for q in page]}
    if next_token is not None:
        out["NextToken"] = next_token
    return out


@action("TagQueue")
async def tag_queue(call: Call) -> dict[str, Any]:
    info = await queue_of(call, ADMIN)
    tags = call.params.get("Tags")
    if tags is None or tags == {}:
        raise missing("Tags")
    kept = {k: v for k, v in info.settings.tags if not isinstance(tags, dict) or k not in tags}
    merged = kept | check_tags(tags, len(kept))
    await call.request.app[CATALOG].update_queue(info.name, {"tags": tuple(sorted(merged.items()))})
    return {}


@action("UntagQueue")
async def untag_queue(call: Call) -> dict[str, Any]:
    info = await queue_of(call, ADMIN)
    keys = call.params.get("TagKeys")
    if not isinstance(keys, list) or not keys:
        raise missing("TagKeys")
    left = {k: v for k, v in info.settings.tags if k not in set(map(str, keys))}
    await call.request.app[CATALOG].update_queue(info.name, {"tags": tuple(sorted(left.items()))})
    return {}


@action("ListQueueTags")
async def list_queue_tags(call: Call) -> dict[str, Any]:
    info = await queue_of(call, READ)
    return {"Tags": dict(info.settings.tags)} if info.settings.tags else {}
