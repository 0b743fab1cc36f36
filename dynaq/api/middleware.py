"""The one place where errors become HTTP responses (and where requests are timed).

Every :class:`~dynaq.errors.DynaqError` maps to its status with a JSON body
``{"error": "...", "code": "..."}``; aiohttp's own HTTP errors (unknown route,
wrong method, body too large) get the same shape; anything else is logged
with its traceback and answered with a plain 500 JSON body, never a traceback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from dynaq.api.auth import ACCESS, check_access
from dynaq.api.codec import json_response
from dynaq.api.drain import IN_FLIGHT
from dynaq.api.internal import check_peer, is_internal
from dynaq.api.keys import METRICS
from dynaq.api.params import refuse_repeated_query
from dynaq.api.worker_metrics import WORKER_SCRAPE
from dynaq.errors import DynaqError, NotFound, Unauthorized

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_OWN_APIS = ("/v1/", "/v2/", "/api/")
"""Path prefixes of dynaq's own APIs (the AWS protocols have theirs)."""

_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


@web.middleware
async def front_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every request's way in, as one middleware (each layer of aiohttp middleware
    costs a coroutine frame and a wrapper per request, a tenth of a single
    enqueue's CPU when there were four):

    1. the ``/internal/`` peer check (:func:`~dynaq.api.internal.check_peer`),
       or the client-token check (:func:`~dynaq.api.auth.check_access`);
    2. the handler;
    3. errors into their JSON responses (:func:`error_response`);
    4. the latency by route template, method and final status, refused
       requests included with their 4xx.
    """
    started = time.perf_counter()
    status = 500
    in_flight = request.app[IN_FLIGHT]
    in_flight.enter()
    try:
        try:
            if is_internal(request):
                await check_peer(request)
            else:
                policy = request.app.get(ACCESS)
                if policy is not None:
                    check_access(request, policy)
            if (
                request.query_string
                and request.path.startswith(_OWN_APIS)
                and request.match_info.route.resource is not None  # unrouted: 404 or 405 first
            ):
                refuse_repeated_query(request.query)
            response = await handler(request)
        except Exception as exc:  # noqa: BLE001 - every error becomes a response
            response = error_response(request, exc)
        status = response.status
        return response
    finally:
        in_flight.leave()
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        labels = {"method": request.method, "route": route, "status": str(status)}
        request.app[METRICS].observe(
            "http_request_duration_seconds", time.perf_counter() - started, labels
        )


def error_response(request: web.Request, exc: Exception) -> web.StreamResponse:
    """The JSON response for ``exc``; an HTTP redirect or success is re-raised."""
    if isinstance(exc, DynaqError):
        if exc.status >= 500:
            log.warning(
                "request failed", extra={"path": request.path, "code": exc.code, "error": str(exc)}
            )
        resp = json_response({"error": exc.message, "code": exc.code, **exc.details()}, exc.status)
        if isinstance(exc, Unauthorized):
            resp.headers["WWW-Authenticate"] = exc.challenge
        return resp
    if isinstance(exc, web.HTTPException):
        if exc.status < 400:
            raise exc
        message = exc.reason
        if exc.status == 413:
            message = "request body is over the size limit"
        resp = json_response(
            {"error": message, "code": _HTTP_CODES.get(exc.status, "http_error")}, exc.status
        )
        if "Allow" in exc.headers:
            resp.headers["Allow"] = exc.headers["Allow"]
        return resp
    log.exception(
        "unhandled error",
        extra={"path": request.path, "method": request.method},
        exc_info=exc,
    )
    return json_response({"error": "internal error", "code": "internal"}, 500)


async def serve_metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: the Prometheus text format (404 when Prometheus is off)."""
    text = request.app[METRICS].exposition()
    if text is None:
        raise NotFound("Prometheus metrics are off (stats.prometheus = false)")
    scrape = request.app.get(WORKER_SCRAPE)
    if scrape is not None:  # a node of several workers: every worker's figures
        text = await scrape.merged(text)
    return web.Response(body=text, content_type="text/plain", charset="utf-8", headers={})
