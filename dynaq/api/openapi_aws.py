"""The OpenAPI path of the SQS wire protocol (:mod:`dynaq.api.aws`): ``POST /``.

SQS's own model (botocore's ``sqs`` service description) is the reference for
each action's parameters; this entry describes the envelope: the target
header, the JSON 1.0 body and SQS's error shape.
"""

from __future__ import annotations

from dynaq.api.openapi_common import Obj, errors, operation

AWS_JSON = "application/x-amz-json-1.0"


def paths(actions: list[str]) -> Obj:
    """``actions``: the SQS actions the node serves."""
    aws_error = {
        "type": "object",
        "required": ["__type", "message"],
        "properties": {
            "__type": {"type": "string", "pattern": "^com\\.amazonaws\\.sqs#[A-Za-z.]+$"},
            "message": {"type": "string"},
        },
    }

    def failure(what: str) -> Obj:
        return {
            "description": what + " (SQS's error shape; x-amzn-query-error names the code).",
            "content": {AWS_JSON: {"schema": aws_error}},
        }

    return {
        "/": {
            "post": operation(
                "sqs",
                "Amazon SQS (AWS JSON 1.0) and SNS (Query) protocols, as AWS SDKs send them",
                "sqs",
                {
                    "200": {
                        "description": "The action's result, as SQS answers it.",
                        "content": {AWS_JSON: {"schema": {"type": "object"}}},
                    },
                    "400": failure("A refused request"),
                    "403": failure("A missing, unknown or wrong signature, or a denied grant"),
                    "500": failure("A failure of the node"),
                    "503": failure("The node or a peer is not serving; retry"),
                    **errors(413),
                },
                parameters=[
                    {
                        "name": "X-Amz-Target",
                        "in": "header",
                        "required": True,
                        "schema": {"enum": [f"AmazonSQS.{a}" for a in sorted(actions)]},
                    }
                ],
                body={
                    "required": True,
                    "content": {AWS_JSON: {"schema": {"type": "object"}}},
                },
                description="Signed with AWS SigV4 by a key from [aws] keys, or unsigned "
                "where the node allows it. A form-encoded body with an Action (and no "
                "X-Amz-Target) is Amazon SNS's Query protocol, answered in XML; see the "
                "README's SQS and SNS section.",
            )
        }
    }
