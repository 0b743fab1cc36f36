"""OpenAPI description of processor status (:mod:`dynaq.api.processors`)."""

from __future__ import annotations

from dynaq.api.openapi_common import (
    Obj,
    body,
    errors,
    nullable,
    operation,
    path_param,
    response,
)
from dynaq.services.processors import INPUT_KINDS, KINDS, MAX_IO, STATES, STRATEGIES

TAG = "v2"
_COUNT = {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
_TEXT = {"type": "string", "minLength": 1, "maxLength": 1024}
NAME = path_param(
    "name",
    {"type": "string", "pattern": r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,159}$"},
    "A processor's name: <graph>.<processor>.",
)


def paths() -> Obj:
    position = {
        "type": "object",
        "required": ["name", "kind"],
        "properties": {
            "name": _TEXT,
            "kind": {"enum": sorted(INPUT_KINDS)},
            "position": nullable({**_COUNT, "description": "Next index read (streams)."}),
            "lag": nullable({**_COUNT, "description": "Entries ahead of the position."}),
        },
        "additionalProperties": False,
    }
    reported = {
        "graph": _TEXT,
        "kind": {"enum": sorted(KINDS)},
        "strategy": {"enum": sorted(STRATEGIES)},
        "state": {"enum": sorted(STATES)},
        "worker": _TEXT,
        "inputs": {"type": "array", "items": position, "maxItems": MAX_IO},
        "outputs": {"type": "array", "items": _TEXT, "maxItems": MAX_IO},
        "error": nullable({"type": "string", "maxLength": 1024}),
        "attempts": _COUNT,
        "delivered": _COUNT,
        "handled_errors": _COUNT,
        "last_delivery_ms": nullable(_COUNT),
        "interval_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600},
    }
    required = sorted(set(reported) - {"error", "last_delivery_ms"})
    report = {
        "type": "object",
        "required": required,
        "properties": reported,
        "additionalProperties": False,
    }
    shown = {
        "type": "object",
        "required": [*required, "name", "reported_ms", "age_s", "alive", "lag"],
        "properties": {
            **reported,
            "name": {"type": "string"},
            "reported_ms": _COUNT,
            "age_s": {"type": "number", "minimum": 0},
            "alive": {"type": "boolean"},
            "lag": _COUNT,
        },
    }
    return {
        "/v2/processors": {
            "get": operation(
                "listProcessors",
                "Every processor's last report: positions, lag, attempts, handled errors",
                TAG,
                {
                    "200": response(
                        "The processors.",
                        json={
                            "type": "object",
                            "required": ["processors"],
                            "properties": {"processors": {"type": "array", "items": shown}},
                        },
                    )
                },
            )
        },
        "/v2/processors/{name}": {
            "get": operation(
                "describeProcessor",
                "One processor's last report",
                TAG,
                {"200": response("The report.", json=shown), **errors(404, 422)},
                parameters=[NAME],
            ),
            "put": operation(
                "reportProcessor",
                "A worker's report of one processor (dynaq worker sends these)",
                TAG,
                {"200": response("The report as stored.", json=shown), **errors(413, 422)},
                parameters=[NAME],
                body=body(json=report),
            ),
            "delete": operation(
                "forgetProcessor",
                "Drop a processor's report",
                TAG,
                {
                    "200": response(
                        "Dropped.",
                        json={
                            "type": "object",
                            "required": ["deleted"],
                            "properties": {"deleted": {"const": True}},
                        },
                    ),
                    **errors(404, 422),
                },
                parameters=[NAME],
            ),
        },
    }
