"""The OpenAPI 3.1 description of every route, served at ``GET /openapi.json``.

Built in code as a dict: the paths come from :mod:`~dynaq.api.openapi_v1`,
:mod:`~dynaq.api.openapi_v2`, :mod:`~dynaq.api.openapi_batches`, :mod:`~dynaq.api.openapi_streams` and
:mod:`~dynaq.api.openapi_node`, the shared pieces (error body, ids, messages)
from :mod:`~dynaq.api.openapi_common`. A
node serves the description with its own configured limits, so every range in
it is the one that node enforces. ``tests/api/test_openapi.py`` checks that
the routes and the description name the same operations; the schemathesis test
checks the node against it.
"""

from __future__ import annotations

from aiohttp import web

from dynaq.api import (
    openapi_aws,
    openapi_batches,
    openapi_node,
    openapi_processors,
    openapi_queues,
    openapi_streams,
    openapi_tasks,
    openapi_topics,
    openapi_transactions,
    openapi_v1,
    openapi_v2,
)
from dynaq.api.aws import (  # noqa: F401  (they register the actions)
    sqs_messages,
    sqs_move_tasks,
    sqs_queues,
)
from dynaq.api.aws.sqs import ACTIONS as SQS_ACTIONS
from dynaq.api.codec import json_response
from dynaq.api.openapi_common import (
    JSON,
    MSGPACK,
    Obj,
    SpecLimits,
    error_responses,
    errors,
)
from dynaq.api.openapi_schemas import schemas

OPENAPI: web.AppKey[Obj] = web.AppKey("openapi")
OPENAPI_PATH = "/openapi.json"

__all__ = ["JSON", "MSGPACK", "OPENAPI", "OPENAPI_PATH", "SpecLimits", "build_spec", "serve"]

_DESCRIPTION = """\
dynaq: queues, topics with fanout, at-least-once delivery. The v1 routes are
Dynamiq's; the v2 routes take batches in JSON or msgpack.

Every error dynaq answers is JSON `{{"error": "...", "code": "..."}}` with a
precise status. In JSON, message ids are decimal strings (JavaScript numbers
cannot hold every int64); in msgpack, integers.

Requests that are not HTTP at all (a header line over 8190 bytes, a bad
Content-Length, a method that is not a token) are refused by aiohttp's parser
with a text/plain 400 before any route runs; they are outside this description.
Each GET route also answers HEAD (aiohttp adds it), except the v1 receive
(a receive locks what it returns, so a HEAD there would hide messages).

Limits on this node: a message with its attributes holds at most {message}
bytes, a request body at most {request} bytes, a batch at most {batch}
messages or ids."""


def build_spec(limits: SpecLimits | None = None) -> Obj:
    """The whole description, with ranges from ``limits`` (the defaults if None)."""
    limits = limits or SpecLimits()
    spec: Obj = {
        "openapi": "3.1.0",
        "info": {
            "title": "dynaq",
            "version": "1",
            "description": _DESCRIPTION.format(
                message=limits.max_message_bytes,
                request=limits.max_request_bytes,
                batch=limits.max_batch,
            ),
            "license": {"name": "MIT", "identifier": "MIT"},
        },
        "tags": [
            {"name": "v1", "description": "Dynamiq-compatible"},
            {"name": "v2", "description": "Batches in JSON or msgpack"},
            {"name": "bulk", "description": "Bulk reads for analytics (the Spark source)"},
            {"name": "batches", "description": "Batch-completion tracking (Carlyle's routes)"},
            {"name": "streams", "description": "Typed persistent streams (Sherlock's)"},
            {"name": "node", "description": "Health and this description"},
            {"name": "internal", "description": "Node to node; never exposed through HAProxy"},
            {"name": "sqs", "description": "Amazon SQS's wire protocol"},
        ],
        "paths": {
            **openapi_v1.paths(limits),
            **openapi_v2.paths(limits),
            **openapi_transactions.paths(limits),
            **openapi_queues.paths(),
            **openapi_tasks.paths(),
            **openapi_batches.paths(limits),
            **openapi_streams.paths(),
            **openapi_topics.paths(),
            **openapi_processors.paths(),
            **openapi_node.paths(),
            **openapi_aws.paths(list(SQS_ACTIONS)),
        },
        "components": {
            "schemas": schemas(limits),
            "responses": {**error_responses(), **openapi_transactions.responses()},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        # Tokens are needed only when the node has some configured (see the README).
        "security": [{"bearer": []}, {}],
    }
    # Any route may answer these: a missing or weak token, a body that trickles or
    # does not match its framing or Content-Encoding.
    for path, item in spec["paths"].items():
        for op in item.values():
            if isinstance(op, dict) and "responses" in op and path != "/health":
                for status, response in errors(400, 401, 403, 408).items():
                    op["responses"].setdefault(status, response)
    return spec


async def serve(request: web.Request) -> web.Response:
    """``GET /openapi.json``: the description built when the app was."""
    return json_response(request.app[OPENAPI])
