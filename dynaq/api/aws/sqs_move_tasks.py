"""SQS message-move tasks on dynaq's redrive tasks
(:mod:`dynaq.services.queues.tasks`): start, list, cancel.

* StartMessageMoveTask moves a dead-letter queue's messages back to where they
  came from (or to DestinationArn) at up to 500 a second, as SQS.
* CancelMessageMoveTask stops a running one before its next page; what it moved
  stays moved. A handle that names no running redrive (unknown, finished, or a
  purge's) is ResourceNotFoundException, as SQS answers for a finished task.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

from dynaq.api.aws.sqs import Call, action
from dynaq.api.aws.sqs_validation import int_param
from dynaq.api.aws.sqs_wire import SqsError, invalid, missing, name_of_arn, queue_arn
from dynaq.api.keys import CATALOG, QUEUES
from dynaq.core.access import ADMIN, READ
from dynaq.errors import NotFound, QueueNotFound, TaskNotRunning

_TASK_HANDLE = re.compile(r"[0-9a-f]{32}")


@action("StartMessageMoveTask")
async def start_message_move_task(call: Call) -> dict[str, Any]:
    """As SQS: the source must exist (else ResourceNotFoundException) and be some
    queue's dead-letter queue (as this node's catalog knows the queues), and it may
    have one active task at a time (InvalidParameterValue otherwise; two starts
    through two nodes at the same instant may both run, as with PurgeQueue)."""
    arn = call.params.get("SourceArn")
    if arn is None or arn == "":
        raise missing("SourceArn")
    source = name_of_arn(arn, "SourceArn")
    call.require(ADMIN, source)
    catalog = call.request.app[CATALOG]
    try:
        info = await catalog.queue(source)
    except QueueNotFound:
        raise _not_found("SourceArn") from None
    dest = call.params.get("DestinationArn")
    to_queue = None if dest is None else name_of_arn(dest, "DestinationArn")
    rate = int_param(
        "MaxNumberOfMessagesPerSecond", call.params.get("MaxNumberOfMessagesPerSecond", 500), 1, 500
    )
    if not await catalog.dead_letter_sources(source):
        raise invalid("Source queue must be configured as a Dead Letter Queue.")
    if to_queue is not None:
        if to_queue == source:
            raise invalid("Source queue arn and destination queue arn cannot be the same.")
        try:
            await catalog.queue(to_queue)
        except QueueNotFound:
            raise _not_found("DestinationArn") from None
    tasks = call.request.app[QUEUES].tasks
    recent = await tasks.list_for(source, "redrive", 10)
    if any(t["state"] in ("running", "cancelling") for t in recent):
        raise invalid(
            "There is already a task running. Only one active task is allowed for a source "
            "queue arn at a given time."
        )
    task = await tasks.start_redrive(info, to_queue, rate)
    return {"TaskHandle": task["id"]}


def _not_found(param: str) -> SqsError:
    return SqsError(
        "ResourceNotFoundException",
        f"The resource that you specified for the {param} parameter doesn't exist.",
        query_code="ResourceNotFoundException",
    )


_STATUS = {"running": "RUNNING", "cancelling": "CANCELLING", "cancelled": "CANCELLED",
           "done": "COMPLETED", "failed": "FAILED", "interrupted": "FAILED"}  # fmt: skip


@action("CancelMessageMoveTask")
async def cancel_message_move_task(call: Call) -> dict[str, Any]:
    """SQS's answer for a handle that names no running redrive (unknown, finished, or
    a purge): ResourceNotFoundException, as for a task that has finished."""
    handle = call.params.get("TaskHandle")
    if not isinstance(handle, str) or not handle:
        raise missing("TaskHandle")
    tasks = call.request.app[QUEUES].tasks
    task = None
    if _TASK_HANDLE.fullmatch(handle):
        with contextlib.suppress(NotFound):
            task = await tasks.get(handle)
    if task is None or task["kind"] != "redrive":
        raise _no_task()
    call.require(ADMIN, task["queue"])
    try:
        done = await tasks.cancel(handle, task["queue"])
    except (NotFound, TaskNotRunning):
        raise _no_task() from None
    return {"ApproximateNumberOfMessagesMoved": done["moved"]}


def _no_task() -> SqsError:
    return SqsError(
        "ResourceNotFoundException",
        "The resource that you requested does not exist.",
        query_code="ResourceNotFoundException",
    )


@action("ListMessageMoveTasks")
async def list_message_move_tasks(call: Call) -> dict[str, Any]:
    arn = call.params.get("SourceArn")
    if arn is None or arn == "":
        raise missing("SourceArn")
    source = name_of_arn(arn, "SourceArn")
    call.require(READ, source)
    await call.request.app[CATALOG].queue(source)
    limit = int_param("MaxResults", call.params.get("MaxResults", 1), 1, 10)
    tasks = await call.request.app[QUEUES].tasks.list_for(source, "redrive", limit)
    results = []
    for t in tasks:
        r: dict[str, Any] = {
            "TaskHandle": t["id"],
            "Status": _STATUS.get(t["state"], "RUNNING"),
            "SourceArn": queue_arn(call.region, source),
            "MaxNumberOfMessagesPerSecond": t["max_per_s"],
            "ApproximateNumberOfMessagesMoved": t["moved"],
            "StartedTimestamp": t["started_at_ms"],
        }
        if t.get("to_queue"):
            r["DestinationArn"] = queue_arn(call.region, t["to_queue"])
        if t.get("error"):
            r["FailureReason"] = t["error"]
        results.append(r)
    return {"Results": results}
