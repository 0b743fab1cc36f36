"""SQS's AWS JSON 1.0 wire details: errors, queue URLs and ARNs, message attributes
and the MD5 digests SDKs verify.

The digests follow SQS's published algorithm (botocore checks them on every
send and receive): the body's MD5 as hex, and for message attributes, per
attribute in name order, length-prefixed (4-byte big-endian) name, data type
and value, with a transport byte between type and value (1: string, 2: binary).
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from dynaq.core.messages import HIDDEN_ATTRIBUTE_PREFIXES, TYPES_ATTRIBUTE

ACCOUNT = "000000000000"
"""The account id in every queue URL and ARN (dynaq has one namespace)."""
HIDDEN_PREFIXES = HIDDEN_ATTRIBUTE_PREFIXES
MAX_ATTRIBUTES = 10


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


def no_queue() -> SqsError:
    return SqsError(
        "QueueDoesNotExist",
        "The specified queue does not exist.",
        query_code="AWS.SimpleQueueService.NonExistentQueue",
    )


def queue_url(request: web.Request, name: str) -> str:
    """A URL naming the queue that stays valid through any node and any balancer
    (it is built from the Host the client used)."""
    return f"{request.scheme}://{request.host}/{ACCOUNT}/{name}"


def queue_arn(region: str, name: str) -> str:
    return f"arn:aws:sqs:{region}:{ACCOUNT}:{name}"


def name_of_url(url: object) -> str:
    """The queue name in a queue URL (its last path segment)."""
    if not isinstance(url, str) or not url:
        raise missing("QueueUrl")
    name = url.rstrip("/").rsplit("/", 1)[-1]
    if not name:
        raise invalid(f"Value {url} for parameter QueueUrl is invalid.")
    return name


def name_of_arn(arn: object) -> str:
    if not isinstance(arn, str) or not arn.startswith("arn:") or arn.count(":") < 5:
        raise invalid(f"Value {arn} for parameter deadLetterTargetArn is invalid.")
    return arn.rsplit(":", 1)[-1]


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _field(b: bytes) -> bytes:
    return struct.pack(">I", len(b)) + b


def attributes_md5(attributes: Mapping[str, Mapping[str, Any]]) -> str:
    """MD5OfMessageAttributes of SQS-shaped attributes (``{name: {DataType, StringValue |
    BinaryValue}}``, binary values as bytes)."""
    out = bytearray()
    for name in sorted(attributes):
        a = attributes[name]
        data_type = str(a["DataType"])
        out += _field(name.encode()) + _field(data_type.encode())
        if "BinaryValue" in a:
            out += b"\x02" + _field(bytes(a["BinaryValue"]))
        else:
            out += b"\x01" + _field(str(a["StringValue"]).encode())
    return md5_hex(bytes(out))


def to_dynaq_attributes(raw: object) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """SQS MessageAttributes → dynaq attributes (values as strings; binary as base64;
    non-String types recorded in :data:`TYPES_ATTRIBUTE`) and the SQS-shaped ones
    (for the digest)."""
    if raw is None:
        return {}, {}
    if not isinstance(raw, dict):
        raise invalid("MessageAttributes must be a map.")
    if len(raw) > MAX_ATTRIBUTES:
        raise invalid(
            f"Number of message attributes [{len(raw)}] exceeds the allowed maximum [10]."
        )
    attrs: dict[str, str] = {}
    types: dict[str, str] = {}
    shaped: dict[str, dict[str, Any]] = {}
    for name, a in raw.items():
        if not isinstance(name, str) or not name or name.startswith(HIDDEN_PREFIXES):
            raise invalid(f"Message attribute name '{name}' is invalid.")
        if not isinstance(a, dict) or not isinstance(a.get("DataType"), str):
            raise invalid(f"The message attribute '{name}' must contain a DataType.")
        data_type = a["DataType"]
        base = data_type.split(".", 1)[0]
        if base == "Binary":
            value = a.get("BinaryValue")
            if not isinstance(value, str):
                raise invalid(f"The message attribute '{name}' must contain a BinaryValue.")
            try:
                blob = base64.b64decode(value, validate=True)
            except ValueError:
                raise invalid(
                    f"The message attribute '{name}' has a malformed BinaryValue."
                ) from None
            attrs[name] = value
            shaped[name] = {"DataType": data_type, "BinaryValue": blob}
        elif base in ("String", "Number"):
            value = a.get("StringValue")
            if not isinstance(value, str):
                raise invalid(f"The message attribute '{name}' must contain a StringValue.")
            if base == "Number":
                try:
                    float(value)
                except ValueError:
                    raise invalid(
                        f"Can't cast '{value}' of attribute '{name}' to a number."
                    ) from None
            attrs[name] = value
            shaped[name] = {"DataType": data_type, "StringValue": value}
        else:
            raise invalid(f"The message attribute '{name}' has an invalid DataType '{data_type}'.")
        if data_type != "String":
            types[name] = data_type
    if types:
        attrs[TYPES_ATTRIBUTE] = json.dumps(types, separators=(",", ":"), sort_keys=True)
    return attrs, shaped


def from_dynaq_attributes(
    attributes: Mapping[str, str] | None, wanted: list[str] | None
) -> dict[str, dict[str, Any]]:
    """dynaq attributes → SQS MessageAttributes (those ``wanted``: names, ``All`` or
    ``.*``, or prefixes ``foo.*``); any attribute set through dynaq's own API is a
    ``String``. Binary values come back as bytes (botocore base64-encodes them)."""
    if not attributes or not wanted:
        return {}
    types: dict[str, str] = {}
    if TYPES_ATTRIBUTE in attributes:
        try:
            types = {str(k): str(v) for k, v in json.loads(attributes[TYPES_ATTRIBUTE]).items()}
        except (ValueError, AttributeError):
            types = {}
    out: dict[str, dict[str, Any]] = {}
    for name, value in attributes.items():
        if name.startswith(HIDDEN_PREFIXES) or not _selected(name, wanted):
            continue
        data_type = types.get(name, "String")
        if data_type.startswith("Binary"):
            out[name] = {"DataType": data_type, "BinaryValue": base64.b64decode(value)}
        else:
            out[name] = {"DataType": data_type, "StringValue": value}
    return out


def _selected(name: str, wanted: list[str]) -> bool:
    for w in wanted:
        if w in ("All", ".*") or w == name or (w.endswith(".*") and name.startswith(w[:-1])):
            return True
    return False


def wire_attributes(shaped: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """SQS-shaped attributes as JSON (binary values base64)."""
    out: dict[str, dict[str, Any]] = {}
    for name, a in shaped.items():
        if "BinaryValue" in a:
            out[name] = {
                "DataType": a["DataType"],
                "BinaryValue": base64.b64encode(bytes(a["BinaryValue"])).decode(),
            }
        else:
            out[name] = dict(a)
    return out
