"""Queue task operations as data: purge, redrive (dead letters back), cancel, task progress,
and which queues use a dead-letter queue (see :mod:`dynaq.client.ops`)."""

from __future__ import annotations

from typing import Any

from dynaq.client.ops import JSON, Call, Op, Retry, json_bytes, quoted, single
from dynaq.client.types import TaskInfo


def _task(got: Any) -> TaskInfo:
    return TaskInfo.from_wire(got)


def purge(queue: str) -> Op[TaskInfo]:
    """Start deleting every message of ``queue`` enqueued before now (a background task)."""
    return single(Call("POST", f"/v2/queues/{quoted(queue)}/purge", _task, retry=Retry.UNSENT))


def redrive(dlq: str, to_queue: str | None, max_per_s: int | None) -> Op[TaskInfo]:
    """Start moving ``dlq``'s messages back to their origin (or ``to_queue``)."""
    body: dict[str, Any] = {}
    if to_queue is not None:
        body["to_queue"] = to_queue
    if max_per_s is not None:
        body["max_per_s"] = max_per_s
    return single(
        Call(
            "POST",
            f"/v2/queues/{quoted(dlq)}/redrive",
            _task,
            body=json_bytes(body),
            content_type=JSON,
            retry=Retry.UNSENT,
        )
    )


def cancel_task(queue: str, task_id: str) -> Op[TaskInfo]:
    """Stop a running redrive of ``queue`` before its next page (what moved stays moved)."""
    path = f"/v2/queues/{quoted(queue)}/tasks/{quoted(task_id)}/cancel"
    return single(Call("POST", path, _task, retry=Retry.UNSENT))


def task(task_id: str) -> Op[TaskInfo]:
    return single(Call("GET", f"/v2/tasks/{quoted(task_id)}", _task))


def dead_letter_sources(dlq: str) -> Op[list[str]]:
    def read(got: Any) -> list[str]:
        return [str(q) for q in got["queues"]]

    return single(Call("GET", f"/v2/queues/{quoted(dlq)}/dead_letter_sources", read))
