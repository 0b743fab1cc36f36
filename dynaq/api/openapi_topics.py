"""OpenAPI description of the v2 topic routes (:mod:`dynaq.api.topics_v2`)."""

from __future__ import annotations

from dynaq.api.openapi_common import TOPIC, Obj, body, errors, nullable, operation, ref, response
from dynaq.api.topics_v2 import MAX_REPLAY

TAG = "v2"
_INDEX = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}


def paths() -> Obj:
    topic = {
        "type": "object",
        "required": ["name", "queues", "history", "history_stream"],
        "properties": {
            "name": ref("Name"),
            "queues": {"type": "array", "items": ref("Name")},
            "history": {"type": "boolean"},
            "history_stream": nullable({"type": "string"}),
        },
        "additionalProperties": False,
    }
    settings = {
        "type": "object",
        "required": ["history"],
        "properties": {
            "history": {
                "type": "boolean",
                "description": "Keep what is published from now on in the stream topic.<name>.",
            }
        },
        "additionalProperties": False,
    }
    replay_body = {
        "type": "object",
        "required": ["queue"],
        "properties": {
            "queue": ref("Name"),
            "from_index": _INDEX,
            "since_ms": {**_INDEX, "description": "Publish time (ms since the epoch)."},
            "max": {"type": "integer", "minimum": 1, "maximum": MAX_REPLAY},
        },
        "additionalProperties": False,
    }
    replayed = {
        "type": "object",
        "required": ["read", "enqueued", "next_index", "done"],
        "properties": {
            "read": {"type": "integer", "minimum": 0},
            "enqueued": {
                "type": "integer",
                "minimum": 0,
                "description": "Fewer than read when the queue's filter policy drops some.",
            },
            "next_index": _INDEX,
            "done": {"type": "boolean"},
        },
        "additionalProperties": False,
    }
    return {
        "/v2/topics/{topic}": {
            "get": operation(
                "describeTopic",
                "A topic, its subscribed queues and whether it keeps its history",
                TAG,
                {"200": response("The topic.", json=topic), **errors(404, 503)},
                parameters=[TOPIC],
            ),
            "patch": operation(
                "configureTopic",
                "Keep (or stop keeping) what is published to a topic as a stream",
                TAG,
                {"200": response("The topic.", json=topic), **errors(404, 409, 422, 503)},
                parameters=[TOPIC],
                body=body(json=settings),
            ),
        },
        "/v2/topics/{topic}/replay": {
            "post": operation(
                "replayTopic",
                "Put a topic's history, from an index or a time, into a queue",
                TAG,
                {
                    "200": response("What was replayed.", json=replayed),
                    **errors(404, 413, 422, 503),
                },
                parameters=[TOPIC],
                body=body(json=replay_body),
            )
        },
    }
