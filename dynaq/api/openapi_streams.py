"""The OpenAPI paths of typed persistent streams (:mod:`dynaq.api.streams`)."""

from __future__ import annotations

from dynaq.api.openapi_common import (
    Obj,
    body,
    errors,
    link,
    nullable,
    operation,
    path_param,
    query_param,
    ref,
    response,
)
from dynaq.api.streams import MAX_ENTRIES, MAX_INDEX, MAX_LEASE_S, MIN_LEASE_S
from dynaq.core.stream_copies import (
    DECLARED_PATH,
    FOLLOW_PATH,
    HISTORY_PATH,
    REPORT_PATH,
    SIZE_PATH,
)
from dynaq.streams.retention import MAX_AGE_S

TAG = "streams"
NAME = path_param("name", ref("Name"), "A stream's name.")
_TOKEN = {
    "name": "X-Publisher-Token",
    "in": "header",
    "required": False,
    "description": "The publisher lease's fencing token (required while a lease is held).",
    "schema": {"type": "string", "pattern": "^[0-9]{1,18}$"},
}
_INDEX = {"type": "integer", "minimum": 0, "maximum": MAX_INDEX}
_SIG = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_ORDER_KEY = {"type": ["string", "null"], "minLength": 1}
_HEADERS = {
    "X-Subscription-Id": {
        "description": "This listener's id (DELETE .../subscriptions/{id} ends it).",
        "schema": {"type": "string"},
    },
    "X-Stream-Size": {"description": "Entries in the stream.", "schema": _INDEX},
    "X-Stream-First": {
        "description": "The first index still held: retention removed those before it, "
        "and a read from one of them starts here.",
        "schema": _INDEX,
    },
}


def _obj(required: list[str], **props: Obj) -> Obj:
    return {
        "type": "object",
        "required": required,
        "properties": props,
        "additionalProperties": False,
    }


def _q(name: str, schema: Obj, text: str) -> Obj:
    return query_param(name, schema, text)


def _listen_params() -> list[Obj]:
    flag = {"type": "boolean"}
    return [
        NAME,
        _q("i", _INDEX, "Start at this index."),
        _q("tail", _INDEX, "Start with the last this many entries."),
        _q("since", _INDEX, "Start at the first entry whose order key is at least this."),
        _q("recent", _INDEX, "Start at order key now (epoch ms) minus this many ms."),
        _q("n", {**_INDEX, "minimum": 1}, "Stop after this many entries."),
        _q("until", _INDEX, "Stop before the first entry whose order key is above this."),
        _q("stop_after_bytes", {**_INDEX, "minimum": 1}, "Stop once this many bytes are out."),
        _q("nowait", flag, "Answer with what is there now and end (204 when nothing)."),
        _q("sizeonly", flag, "Answer only the size (JSON and X-Stream-Size)."),
        _q(
            "format",
            {"enum": ["jsonl", "array", "entries_only", "msgpack"]},
            'jsonl (default): `{"index": i, "order": k}\\t<entry>\\n`; array: a JSON array '
            "of {index, order, entry}; entries_only: one entry per line; msgpack: a "
            "sequence of {index, order, entry} maps.",
        ),
    ]


def paths() -> Obj:
    entry_record = _obj(["index", "order", "entry"], index=_INDEX, order=_INDEX, entry={})
    info = _obj(
        ["name", "order_key", "signature", "size", "segments", "fsyncs"],
        name={"type": "string"},
        order_key=_ORDER_KEY,
        signature=_SIG,
        size=_INDEX,
        segments={"type": "integer", "minimum": 1},
        fsyncs={
            "type": "integer",
            "minimum": 0,
            "description": "Data fsyncs since the node started: concurrent appends share one.",
        },
        node={
            "type": "string",
            "description": "In a ring: the node that serves the stream (its authority).",
        },
        copies={
            "type": "object",
            "additionalProperties": {"type": "integer", "minimum": 0},
            "description": "In a ring: each follower's copy, by node, with the size it last "
            "reported (fsync'd).",
        },
    )
    retention = {
        "type": "object",
        "properties": {
            "max_bytes": {"type": "integer", "minimum": 0, "maximum": 2**62},
            "max_age_s": {"type": "number", "minimum": 0, "maximum": MAX_AGE_S},
        },
        "additionalProperties": False,
        "description": "The stream's own limits (0: none; absent: the node's "
        "streams.retention_max_*). The oldest finalized segment files go past them; the "
        "newest finalized one always stays.",
    }
    declared = _obj(
        ["name", "signature", "order_key", "created", "extended", "retention"],
        name={"type": "string"},
        signature=_SIG,
        order_key=_ORDER_KEY,
        created={"type": "boolean"},
        extended={"type": "boolean"},
        retention=retention,
    )
    declare_body = _obj(
        ["schema"],
        schema={"type": "object", "description": "A JSON Schema (draft 2020-12)."},
        order_key={
            **_ORDER_KEY,
            "description": "A required integer field of every entry; null: the index.",
        },
        retention=nullable(retention),
    )
    entries_body = _obj(
        ["entries"], entries={"type": "array", "minItems": 1, "maxItems": MAX_ENTRIES}
    )
    listen_links = {
        "Terminate": link(
            "terminateSubscription",
            "End this listener.",
            parameters={"name": "$request.path.name", "id": "$response.header.X-Subscription-Id"},
        )
    }
    listening = {
        "description": "Chunked: replay, then new entries as they are appended.",
        "headers": _HEADERS,
        "links": listen_links,
        "content": {
            "text/plain": {"schema": {"type": "string"}},
            "application/json": {
                "schema": {
                    "oneOf": [{"type": "array", "items": entry_record}, _obj(["size"], size=_INDEX)]
                }
            },
            "application/x-ndjson": {"schema": {}},
            "application/x-msgpack-seq": {"schema": {}},
        },
    }
    declare_links = {
        op: link(op, what, parameters={"name": "$request.path.name"})
        for op, what in (
            ("appendEntries", "Append to it."),
            ("listenStream", "Listen to it."),
            ("getStreamSchema", "Read its schema."),
            ("acquirePublisher", "Take its publisher lease."),
        )
    }
    return {
        "/v2/streams": {
            "get": operation(
                "listStreams",
                "Every stream (of the whole ring), with its size and node",
                TAG,
                {
                    "200": response(
                        "Streams.",
                        json=_obj(
                            ["streams"],
                            streams={"type": "array", "items": info},
                            unreachable_nodes={
                                "type": "array",
                                "items": {"type": "string"},
                                "description": "Ring members that did not answer: their "
                                "streams are missing from the list.",
                            },
                        ),
                    ),
                    **errors(422),
                },
                parameters=[
                    _q(
                        "hidden",
                        {"type": "boolean"},
                        "Also list hidden streams: those named `_cues.*`, which back "
                        "processors (dynaq.processors). Default false.",
                    )
                ],
            )
        },
        "/v2/streams/{name}": {
            "put": operation(
                "declareStream",
                "Declare a stream (201), or re-declare it (200: same, or with new oneOf variants)",
                TAG,
                {
                    "201": response("Declared.", declare_links, json=declared),
                    "200": response(
                        "Already so declared (or extended).", declare_links, json=declared
                    ),
                    **errors(409, 413, 415, 422, 503),
                },
                parameters=[NAME],
                body=body(json=declare_body, msgpack=declare_body),
            ),
            "get": operation(
                "listenStream",
                "Listen: replay from a start, then follow live (chunked); HEAD gives X-Stream-Size",
                TAG,
                {
                    "200": listening,
                    "204": {"description": "nowait, and nothing to send.", "headers": _HEADERS},
                    **errors(404, 422, 503),
                },
                parameters=_listen_params(),
                description="At most one of i, tail, since, recent; none starts at the "
                "beginning. HEAD answers X-Stream-Size with no body.",
            ),
            "delete": operation(
                "deleteStream",
                "Delete a stream once its listeners have finished (503 for it meanwhile)",
                TAG,
                {"204": {"description": "Deleted."}, **errors(404, 503)},
                parameters=[NAME],
            ),
        },
        "/v2/streams/{name}/schema": {
            "get": operation(
                "getStreamSchema",
                "The stream's schema, order key and signature",
                TAG,
                {
                    "200": response(
                        "The declaration.",
                        json=_obj(
                            ["name", "schema", "order_key", "signature"],
                            name={"type": "string"},
                            schema={"type": "object"},
                            order_key=_ORDER_KEY,
                            signature=_SIG,
                        ),
                    ),
                    **errors(404, 503),
                },
                parameters=[NAME],
            )
        },
        "/v2/streams/{name}/entries": {
            "post": operation(
                "appendEntries",
                "Append entries (durable before the answer); all or none",
                TAG,
                {
                    "200": response(
                        "Appended.",
                        json=_obj(["first_index", "count"], first_index=_INDEX, count=_INDEX),
                    ),
                    **errors(404, 409, 413, 415, 422, 503),
                },
                parameters=[
                    NAME,
                    _TOKEN,
                    _q(
                        "expect_index",
                        _INDEX,
                        "A conditional append: write only if the first entry gets this "
                        "index (the stream holds exactly this many entries when the append "
                        "commits). Otherwise nothing is written and the answer is 409 "
                        '`{"error": ..., "code": "index_taken"}`. Processors use it so that '
                        "an output they recorded an attempt for can land only at the "
                        "recorded index.",
                    ),
                ],
                body=body(json=entries_body, msgpack=entries_body),
            )
        },
        "/v2/streams/{name}/publisher": {
            "post": operation(
                "acquirePublisher",
                "Take the exclusive publisher lease (or renew it with its token)",
                TAG,
                {
                    "201": response(
                        "The lease.",
                        json=_obj(
                            ["token", "ttl_s"],
                            token={"type": "integer", "minimum": 1},
                            ttl_s={"type": "number"},
                        ),
                    ),
                    **errors(404, 409, 413, 415, 422, 503),
                },
                parameters=[NAME, _TOKEN],
                body=body(
                    False,
                    json=_obj(
                        [], ttl_s={"type": "number", "minimum": MIN_LEASE_S, "maximum": MAX_LEASE_S}
                    ),
                ),
            ),
            "delete": operation(
                "releasePublisher",
                "Release the publisher lease",
                TAG,
                {
                    "204": {"description": "Released (or none was held)."},
                    **errors(404, 409, 422, 503),
                },
                parameters=[NAME, {**_TOKEN, "required": True}],
            ),
        },
        "/v2/streams/{name}/subscriptions/{id}": {
            "delete": operation(
                "terminateSubscription",
                "End a listener",
                TAG,
                {"204": {"description": "Told to end."}, **errors(404, 503)},
                parameters=[NAME, path_param("id", {"type": "string"}, "A subscription id.")],
            )
        },
        **_copy_paths(),
    }


def _copy_paths() -> Obj:
    """The node-to-node routes of stream copies (:mod:`dynaq.core.stream_copies`)."""
    answer = {"application/msgpack": {"schema": {"type": "object"}}}
    name = {"type": "string"}

    def internal(op_id: str, summary: str, ok: str, required: list[str], **props: Obj) -> Obj:
        return {
            "post": operation(
                op_id,
                summary + " (node to node only)",
                "internal",
                {"200": {"description": ok, "content": answer}, **errors(404, 413, 422, 503)},
                body=body(msgpack={"type": "object", "required": required, "properties": props}),
            )
        }

    return {
        DECLARED_PATH: internal(
            "internalStreamDeclared",
            "A stream's declaration, for a follower",
            "schema, order_key, signature.",
            ["stream"],
            stream=name,
        ),
        FOLLOW_PATH: internal(
            "internalStreamFollow",
            "A stream's entries from an index on, then live, for a follower",
            "A chunked sequence of {index, order, entry} maps.",
            ["stream", "start"],
            stream=name,
            start=_INDEX,
        ),
        HISTORY_PATH: internal(
            "internalStreamHistory",
            "A topic's history entries, for the stream's authority to stamp and append",
            "ok, once they count as acknowledged.",
            ["stream", "entries"],
            stream=name,
            entries={"type": "array", "items": {"type": "object"}},
        ),
        SIZE_PATH: internal(
            "internalStreamSize",
            "How much of a stream this node holds, for a failover",
            "size: an integer, or null when this node holds no copy.",
            ["stream"],
            stream=name,
        ),
        REPORT_PATH: internal(
            "internalStreamReport",
            "A follower reports the size of its copy (fsync'd)",
            "ok.",
            ["stream", "node", "size"],
            stream=name,
            node=name,
            size=_INDEX,
        ),
    }
