"""schemathesis against a real ``dynaq server`` process, driven by its OpenAPI description.

Every operation gets the examples, coverage and fuzzing phases (valid and
invalid inputs), then a stateful run follows the description's links (create a
queue, enqueue, receive, delete; open a batch, add items, close...). Checks:
no 5xx ever, every 4xx is the ``{"error", "code"}`` JSON body, every response
conforms to the description (status, content type, schema), and every input
the description calls invalid is refused with a 4xx (so its ranges are the
enforced ones). The node must also have logged no unhandled error.

The node runs with small limits (its description serves them, so the
generated inputs stay small and fast); examples and steps are bounded so the
module runs in under a minute on two cores.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import Case, CheckContext, Response
from schemathesis.generation.stateful.state_machine import APIStateMachine

from dynaq.api.openapi import OPENAPI_PATH, SpecLimits, build_spec
from dynaq.services.queue_records import NAME_PATTERN
from dynaq.testing.process import NodeProcess, node_process

# Bounded for CI; DYNAQ_SCHEMATHESIS_EXAMPLES=200 (say) explores deeper by hand.
MAX_EXAMPLES = int(os.environ.get("DYNAQ_SCHEMATHESIS_EXAMPLES", "12"))
STATEFUL_EXAMPLES = 2 * MAX_EXAMPLES
STATEFUL_STEPS = 8
LONG_POLL_CAP_S = 0.05
"""Long polls are real waits (up to 20 s each): capped so the run stays bounded."""


AnyCase = Case[Any]

# msgpack on the wire --------------------------------------------------------


def _packable(value: Any) -> Any:
    """msgpack holds integers in [-2^63, 2^64): a larger generated one goes as an
    ext value (still not an acceptable input, which is what such a case tests)."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        return msgpack.ExtType(1, str(value).encode())
    if isinstance(value, dict):
        return {_packable(k): _packable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_packable(v) for v in value]
    return value


@schemathesis.serializer("application/msgpack")
def _to_msgpack(ctx: schemathesis.SerializationContext, value: Any) -> bytes:
    return bytes(msgpack.packb(_packable(value), use_bin_type=True))


def _jsonable(value: Any) -> Any:
    """msgpack bin values validate as strings (the description's convention for msgpack)."""
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


@schemathesis.deserializer("application/msgpack")
def _from_msgpack(ctx: schemathesis.DeserializationContext, response: Response) -> Any:
    return _jsonable(msgpack.unpackb(response.content, raw=False, strict_map_key=False))


@schemathesis.serializer("application/x-amz-json-1.0")
def _to_aws_json(ctx: schemathesis.SerializationContext, value: Any) -> bytes:
    return json.dumps(value).encode()


@schemathesis.deserializer("application/x-amz-json-1.0")
def _from_aws_json(ctx: schemathesis.DeserializationContext, response: Response) -> Any:
    return json.loads(response.content)


# checks ---------------------------------------------------------------------


@schemathesis.check
def dynaq_error_body(ctx: CheckContext, response: Response, case: AnyCase) -> bool | None:
    """Every 4xx (and 5xx) dynaq answers is JSON ``{"error": str, "code": str}``; on
    the SQS wire protocol (``POST /``) SQS's own error shape, which SDKs parse."""
    if response.status_code < 400:
        return None
    ctype = response.headers.get("content-type", [""])[0]
    if case.path == "/" and ctype.startswith("application/x-amz-json-1.0"):
        data = json.loads(response.content)
        assert set(data) == {"__type", "message"}, data
        assert str(data["__type"]).startswith("com.amazonaws.sqs#") and data["message"], data
        assert response.headers.get("x-amzn-query-error"), "no x-amzn-query-error"
        return True
    assert ctype.startswith("application/json"), f"{response.status_code} as {ctype!r}"
    data = json.loads(response.content)
    assert isinstance(data, dict) and set(data) == {"error", "code"}, data
    assert isinstance(data["error"], str) and data["error"], data
    assert isinstance(data["code"], str) and data["code"], data
    return True


CHECKS = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.status_code_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_schema_conformance,
    dynaq_error_body,
    schemathesis.checks.negative_data_rejection,
]


SYNC_INTERVAL_S = 0.05
"""A deleted queue's name can be created again after 2 intervals + 1 s (the catalog's rule)."""
SINK = "sink"
"""Subscribed to every topic the run arranges, so that publishes fan out somewhere."""


def _arrange(case: AnyCase, url: str) -> None:
    """Make most generated queue and topic names exist before the call.

    Random names almost never exist, and every queue route would stop at its
    404. Three names in four (by a hash, so a shrunk case sees the same state)
    are created first; the rest keep the 404 paths tested. A name deleted
    moments ago (by an earlier case) is re-created once the catalog allows it.
    """
    for kind in ("queue", "topic"):
        name = (case.path_parameters or {}).get(kind)
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            continue
        if zlib.crc32(name.encode()) % 4 == 0:
            continue
        r = requests.put(f"{url}/v1/{kind}s/{name}", timeout=10)
        if r.status_code == 409:  # deleted moments ago: re-creatable after 2 sync intervals + 1 s
            time.sleep(2 * SYNC_INTERVAL_S + 1.1)
            requests.put(f"{url}/v1/{kind}s/{name}", timeout=10)
        if kind == "topic":
            requests.put(f"{url}/v1/topics/{name}/queues/{SINK}", timeout=10)


STREAM_SCHEMA = {"type": "object", "properties": {"ts": {"type": "integer"}}}
"""Declared for most generated stream names (entries: objects; no order key)."""


def _arrange_stream(case: AnyCase, url: str) -> None:
    """Like :func:`_arrange`, for streams: three names in four are declared first,
    with an entry or two so listeners have something to send."""
    name = (case.path_parameters or {}).get("name")
    if not case.path.startswith("/v2/streams/{name}") or not isinstance(name, str):
        return
    if not NAME_PATTERN.fullmatch(name) or zlib.crc32(name.encode()) % 4 == 0:
        return
    body: dict[str, Any] = {"schema": STREAM_SCHEMA, "order_key": None}
    if requests.put(f"{url}/v2/streams/{name}", json=body, timeout=10).status_code == 201:
        entries = {"entries": [{"ts": 1}, {"ts": 2}]}
        requests.post(f"{url}/v2/streams/{name}/entries", json=entries, timeout=10)


def _prepare(case: AnyCase, url: str) -> None:
    """Arrange state, and cap a valid long poll (see :data:`LONG_POLL_CAP_S`);
    invalid values go as generated. A stream listener is made to end when caught
    up (``nowait``): followed live, it would answer only at the request timeout."""
    _arrange(case, url)
    _arrange_stream(case, url)
    if case.method.upper() == "GET" and case.path == "/v2/streams/{name}":
        query = case.query if isinstance(case.query, dict) else {}
        if query.get("nowait") in (None, False, "false", "0", "no"):
            query["nowait"] = True
            case.query = query
    body = case.body
    if isinstance(body, dict):
        wait = body.get("wait_time_s")
        if isinstance(wait, int | float) and not isinstance(wait, bool) and 0 < wait <= 20:
            body["wait_time_s"] = min(wait, LONG_POLL_CAP_S)


# the node -------------------------------------------------------------------

LIMITS = SpecLimits(max_batch=20, max_message_bytes=4096, max_batch_items=5000)
CONFIG = schemathesis.Config.from_dict(
    {
        "seed": 20240601,
        "generation": {"mode": "all", "max-examples": MAX_EXAMPLES},
        "phases": {"stateful": {"max-steps": STATEFUL_STEPS}},
        "request-timeout": 10.0,
        "suppress-health-check": ["too_slow", "filter_too_much", "data_too_large"],
        # A schema-violating body that is also over a route's size limit is refused
        # with 413 before it is parsed: a rejection, as the defaults' 4xx are.
        "checks": {
            "negative_data_rejection": {
                "expected-statuses": [
                    "400",
                    "401",
                    "403",
                    "404",
                    "405",
                    "406",
                    "409",
                    "413",
                    "415",
                    "422",
                    "428",
                    "429",
                    "5xx",
                ]
            }
        },
    }
)
# Loaded from code, not from the node: the pytest integration parametrizes at
# collection, before any node runs (and schemathesis' fixture-loaded schemas
# read ``Item._nodeid``, which pytest 9.2 no longer has). The node fixture
# checks that it serves this very description.
schema = schemathesis.openapi.from_dict(build_spec(LIMITS), config=CONFIG)


@pytest.fixture(scope="module")
def api_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    tmp: Path = tmp_path_factory.mktemp("schemathesis")
    node = node_process(
        tmp,
        env={
            "DYNAQ_HTTP_MAX_BATCH": str(LIMITS.max_batch),
            "DYNAQ_HTTP_MAX_MESSAGE_BYTES": str(LIMITS.max_message_bytes),
            "DYNAQ_HTTP_MAX_REQUEST_BYTES": str(LIMITS.max_request_bytes),
            "DYNAQ_BATCHES_MAX_ITEMS_PER_REQUEST": str(LIMITS.max_batch_items),
            "DYNAQ_EMBEDDED_MAP_SIZE_MB": "512",
            "DYNAQ_SYNC_INTERVAL_S": str(SYNC_INTERVAL_S),
            "DYNAQ_LOG_LEVEL": "warning",
        },
    )
    node.start()
    try:
        requests.put(f"{node.url}/v1/queues/{SINK}", timeout=10).raise_for_status()
        with urllib.request.urlopen(node.url + OPENAPI_PATH, timeout=10) as r:
            assert json.load(r) == schema.raw_schema
        yield node
    finally:
        node.kill()
    # A 500 is answered as JSON, but the middleware also logs it: none may have happened.
    log = node.log_path.read_text(errors="replace")
    assert "unhandled error" not in log, log[-5000:]


@schema.parametrize()
def test_every_operation(case: AnyCase, api_node: NodeProcess) -> None:
    _prepare(case, api_node.url)
    case.call_and_validate(base_url=api_node.url, checks=CHECKS)


def test_stateful(api_node: NodeProcess) -> None:
    # Processor reports age while the machine runs (their listing says which are
    # alive), so a replayed step could draw from a different listing: hypothesis
    # then fails the run as flaky. The stateless cases above cover those routes.
    stable = schema.exclude(path_regex="^/v2/processors")
    base: type[APIStateMachine] = stable.as_state_machine()

    class Machine(base):  # type: ignore[valid-type, misc]
        def before_call(self, case: AnyCase) -> None:
            _prepare(case, api_node.url)

        def get_call_kwargs(self, case: AnyCase) -> dict[str, Any]:
            return {"base_url": api_node.url}

        def validate_response(self, response: Response, case: AnyCase, **kwargs: Any) -> None:
            case.validate_response(response, checks=CHECKS, transport_kwargs=kwargs)

    Machine.run(
        settings=settings(
            max_examples=STATEFUL_EXAMPLES,
            stateful_step_count=STATEFUL_STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
    )
