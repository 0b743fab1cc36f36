"""The OpenAPI description names exactly the routes the app registers, and is valid OpenAPI 3.1."""

from __future__ import annotations

from typing import Any

import aiohttp
from openapi_spec_validator import validate

from dynaq.api.openapi import OPENAPI_PATH, SpecLimits, build_spec
from dynaq.node import Node

_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def _app_routes(node: Node) -> set[tuple[str, str]]:
    """(METHOD, template) of every route; ``canonical`` drops a parameter's regex
    (``{batch_id:\\d+}`` becomes ``{batch_id}``, as OpenAPI writes it)."""
    return {(r.method, r.resource.canonical) for r in node.app.router.routes() if r.resource}


def _spec_routes(spec: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in spec["paths"].items()
        for method in item
        if method in _METHODS
    }


def test_every_route_is_described_and_nothing_else(node: Node) -> None:
    app = _app_routes(node)
    # aiohttp registers a HEAD twin for each GET (allow_head): the description
    # says so once instead of listing HEAD operations that answer like GET. The
    # v1 receive has none: a HEAD must not lock messages nobody gets to see.
    heads = {(m, p) for m, p in app if m == "HEAD"}
    receive = "/v1/queues/{queue}/messages/{batch_size_or_ids}"
    assert heads == {("HEAD", p) for m, p in app if m == "GET" and p != receive}
    spec = _spec_routes(build_spec())
    assert app - heads - spec == set(), "routes missing from the description"
    assert spec - (app - heads) == set(), "described operations the app does not serve"


def test_the_description_is_valid_openapi_3_1() -> None:
    spec = build_spec(SpecLimits(max_batch=7, max_batch_items=9))
    validate(spec)
    ops = [op for item in spec["paths"].values() for m, op in item.items() if m in _METHODS]
    ids = [op["operationId"] for op in ops]
    assert len(ids) == len(set(ids)), "operationIds must be unique"
    for op in ops:
        for status, resp in op["responses"].items():
            for link in resp.get("links", {}).values():
                assert link["operationId"] in ids, (op["operationId"], status, link)
    enqueue = spec["components"]["schemas"]["EnqueueRequest"]["properties"]["messages"]
    assert enqueue["maxItems"] == 7


def test_every_error_response_is_the_error_body() -> None:
    spec = build_spec()
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method not in _METHODS:
                continue
            for status, resp in op["responses"].items():
                if path == "/" and "$ref" not in resp:
                    # SQS's wire protocol: its errors have SQS's shape, which SDKs parse.
                    assert list(resp["content"]) == ["application/x-amz-json-1.0"], status
                    continue
                if status.startswith("4"):
                    assert resp["$ref"].startswith("#/components/responses/"), (path, method)


async def test_served_at_openapi_json(node: Node, http: aiohttp.ClientSession) -> None:
    async with http.get(OPENAPI_PATH) as r:
        assert r.status == 200 and r.content_type == "application/json"
        served = await r.json()
    limits = node.config.http
    assert served == build_spec(
        SpecLimits(
            max_batch=limits.max_batch,
            max_message_bytes=limits.max_message_bytes,
            max_request_bytes=limits.max_request_bytes,
            max_batch_items=node.config.batches.max_items_per_request,
        )
    )
