"""SQS's error shape: the JSON ``__type``, the Query-protocol code botocore maps
exceptions by, and the HTTP status (re-exported by :mod:`.sqs_wire`)."""

from __future__ import annotations

import json

from aiohttp import web


class SqsError(Exception):
    """An error in SQS's shape: ``code`` (JSON ``__type``), the Query-protocol code
    botocore maps exceptions by (``x-amzn-query-error``), and the HTTP status."""

    def __init__(
        self, code: str, message: str, status: int = 400, query_code: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.query_code = query_code or code

    def response(self) -> web.Response:
        side = "Sender" if self.status < 500 else "Receiver"
        body = {"__type": f"com.amazonaws.sqs#{self.code}", "message": self.message}
        return web.Response(
            status=self.status,
            body=json.dumps(body).encode(),
            content_type="application/x-amz-json-1.0",
            headers={"x-amzn-query-error": f"{self.query_code};{side}"},
        )


def invalid(message: str) -> SqsError:
    return SqsError("InvalidParameterValue", message)


def missing(name: str) -> SqsError:
    return SqsError("MissingParameter", f"The request must contain the parameter {name}.")
