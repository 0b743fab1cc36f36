"""``POST /``: SQS (AWS JSON 1.0, an ``X-Amz-Target`` header) or SNS (the Query
protocol, a form-encoded ``Action``), told apart as AWS's endpoints do."""

from __future__ import annotations

from aiohttp import web

from dynaq.api.aws import sns, sqs


async def endpoint(request: web.Request) -> web.StreamResponse:
    if (
        "X-Amz-Target" not in request.headers
        and request.content_type == "application/x-www-form-urlencoded"
    ):
        return await sns.endpoint(request)
    return await sqs.endpoint(request)
