"""The OpenAPI description of background queue tasks: redrive (dead letters back),
purge, cancel, and their progress records."""

from __future__ import annotations

from dynaq.api.openapi_common import QUEUE, Obj, body, errors, nullable, operation, path_param, ref
from dynaq.services.queues.tasks import MAX_RATE_PER_S

TAG = "v2"

_TASK = path_param(
    "task", {"type": "string", "pattern": "^[0-9a-f]{32}$"}, "A task id (32 hex digits)."
)


def _task() -> Obj:
    count = {"type": "integer", "minimum": 0}
    return {
        "type": "object",
        "required": ["id", "kind", "queue", "state", "moved", "skipped", "started_at_ms"],
        "properties": {
            "id": {"type": "string"},
            "kind": {"enum": ["redrive", "purge"]},
            "queue": ref("Name"),
            "to_queue": nullable(ref("Name")),
            "state": {
                "enum": ["running", "cancelling", "cancelled", "done", "failed", "interrupted"]
            },
            "moved": count,
            "skipped": count,
            "max_per_s": count,
            "node": {"type": "string"},
            "started_at_ms": count,
            "updated_at_ms": count,
            "error": {"type": "string"},
        },
        "additionalProperties": False,
    }


def _task_response(description: str) -> Obj:
    return {"description": description, "content": {"application/json": {"schema": _task()}}}


def paths() -> Obj:
    return {
        "/v2/queues/{queue}/redrive": {
            "parameters": [QUEUE],
            "post": operation(
                "v2Redrive",
                "Move this (dead-letter) queue's messages back, at a bounded rate",
                TAG,
                {
                    "202": _task_response("The task started; read its progress at /v2/tasks."),
                    **errors(404, 415, 422, 503),
                },
                body=body(
                    required=False,
                    json={
                        "type": "object",
                        "properties": {
                            "to_queue": nullable(ref("Name")),
                            "max_per_s": {
                                "type": "integer",
                                "minimum": 1,
                                "maximum": MAX_RATE_PER_S,
                                "default": 500,
                            },
                        },
                        "additionalProperties": False,
                    },
                ),
                description=(
                    "Each message goes to to_queue if given, else back to the queue it was "
                    "dead-lettered from; one store batch per page writes the copies and removes "
                    "the originals. Messages with nowhere to go are skipped and stay."
                ),
            ),
        },
        "/v2/queues/{queue}/purge": {
            "parameters": [QUEUE],
            "post": operation(
                "v2Purge",
                "Delete every message enqueued before now, in the background",
                TAG,
                {
                    "202": _task_response("The task started; read its progress at /v2/tasks."),
                    **errors(404, 503),
                },
            ),
        },
        "/v2/queues/{queue}/tasks/{task}/cancel": {
            "parameters": [QUEUE, _TASK],
            "post": operation(
                "v2CancelTask",
                "Stop a running redrive of the queue (what it moved stays moved)",
                TAG,
                {
                    "202": _task_response(
                        "The task stops before its next page: cancelling, then cancelled "
                        "(at once when its node is gone)."
                    ),
                    **errors(404, 409, 422, 503),
                },
            ),
        },
        "/v2/tasks/{task}": {
            "parameters": [_TASK],
            "get": operation(
                "v2Task",
                "A redrive or purge task's progress",
                TAG,
                {
                    "200": _task_response(
                        "Its progress record (kept `queues.task_retention_s`, 14 days, "
                        "after the task ended: 404 then)."
                    ),
                    **errors(404, 422, 503),
                },
            ),
        },
    }
