"""The OpenAPI paths of the node's own routes: ``/health``, ``/openapi.json`` and the
internal hints and catalog news routes (:mod:`dynaq.api.internal`)."""

from __future__ import annotations

from dynaq.api.openapi_common import Obj, body, errors, operation, path_param, ref, response
from dynaq.core.hints import CATALOG_NEWS_PATH, HINTS_PATH


def _obj(required: list[str], **props: Obj) -> Obj:
    return {
        "type": "object",
        "required": required,
        "properties": props,
        "additionalProperties": False,
    }


def _array(items: Obj) -> Obj:
    return {"type": "array", "items": items}


def paths() -> Obj:
    health = _obj(
        ["status", "node", "members"],
        status={"enum": ["starting", "serving", "draining", "stopped"]},
        node={"type": "string"},
        members={"type": "integer", "minimum": 0},
        worker={"type": "string"},
        workers={"type": "integer", "minimum": 2},
        workers_live={"type": "integer", "minimum": 1},
    )
    handover_entry = {
        "type": "array",
        "minItems": 4,
        "maxItems": 5,
        "prefixItems": [
            ref("MessageIdInt"),
            {"type": "number", "minimum": 0, "maximum": 43_200},
            {"type": "integer", "minimum": 0, "maximum": 2**31},
            {"type": ["string", "null"]},
            {
                "oneOf": [
                    {"type": "null"},
                    {"type": "object", "additionalProperties": {"type": "string"}},
                ]
            },
        ],
    }
    hints = {
        "type": "object",
        "properties": {
            "queues": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "properties": {
                        "deleted": _array(ref("MessageIdInt")),
                        "lanes": _array({"type": "integer", "minimum": 0, "maximum": 1023}),
                    },
                },
            },
            "handover": {"type": "object", "additionalProperties": _array(handover_entry)},
        },
    }
    return {
        "/health": {
            "get": operation(
                "health",
                "Whether this node serves",
                "node",
                {
                    "200": response("Serving.", json=health),
                    "503": response("Starting or draining: balancers skip it.", json=health),
                },
            )
        },
        "/v2/status/workers": {
            "get": operation(
                "workers",
                "The processes serving this node",
                "node",
                {
                    "200": response(
                        "On a node of several workers, each live worker at its private "
                        "loopback address (for operators and harnesses on the machine; "
                        "clients use the node's address); else the node itself.",
                        json=_obj(
                            ["node", "workers", "live"],
                            node={"type": "string"},
                            workers={"type": "integer", "minimum": 1},
                            live=_array(
                                _obj(
                                    ["name", "http"],
                                    name={"type": "string"},
                                    http={"type": "string"},
                                )
                            ),
                        ),
                    ),
                },
            )
        },
        "/metrics": {
            "get": operation(
                "metrics",
                "Prometheus text exposition of this node's figures",
                "node",
                {
                    "200": response(
                        "Prometheus text format 0.0.4: queue counters and gauges, batch "
                        "figures, latency histograms per route and store commit.",
                        text={"type": "string"},
                    ),
                    **errors(404),
                },
                description="404 when ``stats.prometheus`` is false.",
            )
        },
        "/ui": {
            "get": operation(
                "consoleRoot",
                "Redirects to the web console",
                "node",
                {"302": {"description": "To ``ui/``."}},
            )
        },
        "/ui/": {
            "get": operation(
                "console",
                "The web console (HTML)",
                "node",
                {
                    "200": {
                        "description": "The page.",
                        "content": {"text/html": {"schema": {"type": "string"}}},
                    }
                },
            )
        },
        "/ui/{asset}": {
            "get": operation(
                "consoleAsset",
                "A file of the web console",
                "node",
                {
                    "200": {
                        "description": "One of the console's files: ``index.html``, "
                        "``console.css``, ``console.js``, ``console-streams.js``, "
                        "``console-batches.js``.",
                        "content": {
                            "text/html": {"schema": {"type": "string"}},
                            "text/javascript": {"schema": {"type": "string"}},
                            "text/css": {"schema": {"type": "string"}},
                        },
                    },
                    **errors(404),
                },
                parameters=[path_param("asset", {"type": "string"}, "The file's name.")],
            )
        },
        "/openapi.json": {
            "get": operation(
                "openapi",
                "This description",
                "node",
                {"200": response("OpenAPI 3.1.", json={"type": "object"})},
            )
        },
        HINTS_PATH: {
            "post": operation(
                "internalHints",
                "Hints and the in-flight handover from a peer (node to node only)",
                "internal",
                {
                    "200": response("Applied.", json=_obj(["ok"], ok={"const": True})),
                    **errors(413, 422),
                },
                body=body(msgpack=hints),
                description="The body is msgpack whatever its Content-Type; any other shape "
                "is a 422 and nothing is applied.",
            )
        },
        CATALOG_NEWS_PATH: {
            "post": operation(
                "internalCatalogNews",
                "A peer changed one queue's or topic's config (node to node only)",
                "internal",
                {
                    "200": response(
                        "The record was re-read from the store (whether or not it still exists).",
                        json=_obj(["ok"], ok={"const": True}),
                    ),
                    **errors(413, 422),
                },
                body=body(
                    msgpack=_obj(
                        ["kind", "name"],
                        kind={"enum": ["queue", "topic"]},
                        name={"type": "string", "minLength": 1},
                    )
                ),
                description="The body is msgpack whatever its Content-Type; any other shape "
                "is a 422. Sent by the node that made the change before it answers its "
                "client, so every live node acts on the change at once.",
            )
        },
    }
