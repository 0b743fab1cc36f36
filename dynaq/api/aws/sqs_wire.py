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

from dynaq.api.aws.sqs_errors import SqsError as SqsError
from dynaq.api.aws.sqs_errors import invalid as invalid
from dynaq.api.aws.sqs_errors import missing as missing
from dynaq.api.aws.sqs_validation import (
    check_attribute_name,
    check_binary_value,
    check_data_type,
    check_string_value,
    data_type_ok,
    number_ok,
)
from dynaq.core.messages import HIDDEN_ATTRIBUTE_PREFIXES, TYPES_ATTRIBUTE

ACCOUNT = "000000000000"
"""The account id in every queue URL and ARN (dynaq has one namespace)."""
HIDDEN_PREFIXES = HIDDEN_ATTRIBUTE_PREFIXES
MAX_ATTRIBUTES = 10


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


def name_of_arn(arn: object, param: str = "deadLetterTargetArn") -> str:
    if not isinstance(arn, str) or not arn.startswith("arn:") or arn.count(":") < 5:
        raise invalid(f"Value {arn} for parameter {param} is invalid.")
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
    (for the digest). What AWS refuses is refused (:mod:`.sqs_validation`)."""
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
        check_attribute_name(name)
        if name.startswith(HIDDEN_PREFIXES):  # "dynaq." (AWS's "AWS." is refused above)
            raise invalid(f"Message attribute name '{name}' is reserved.")
        if not isinstance(a, dict) or not a:
            raise invalid(
                f"The message (user) attribute '{name}' must contain a non-empty message "
                "attribute value."
            )
        data_type = check_data_type(name, a.get("DataType"))
        if data_type.startswith("Binary"):
            value = a.get("BinaryValue")
            blob = check_binary_value(name, value)
            attrs[name] = str(value)
            shaped[name] = {"DataType": data_type, "BinaryValue": blob}
        else:
            value = check_string_value(name, data_type, a.get("StringValue"))
            attrs[name] = value
            shaped[name] = {"DataType": data_type, "StringValue": value}
        if data_type != "String":
            types[name] = data_type
    if types:
        attrs[TYPES_ATTRIBUTE] = json.dumps(types, separators=(",", ":"), sort_keys=True)
    return attrs, shaped


def _stored_types(raw: str | None) -> dict[str, str]:
    """The data types a message's :data:`TYPES_ATTRIBUTE` records, keeping only well
    formed entries: the attribute may have been written through another API, and
    one message's bad record must never fail a receive."""
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}
    # No length bound here: what another API stored with a longer label is still typed.
    return {k: v for k, v in data.items() if isinstance(k, str) and data_type_ok(v, 1 << 20)}


def from_dynaq_attributes(
    attributes: Mapping[str, str] | None, wanted: list[str] | None
) -> dict[str, dict[str, Any]]:
    """dynaq attributes → SQS MessageAttributes (those ``wanted``: names, ``All`` or
    ``.*``, or prefixes ``foo.*``); any attribute set through dynaq's own API is a
    ``String``. Binary values come back as bytes (botocore base64-encodes them).

    Tolerant by design: a value that does not decode as its recorded type (a
    Binary that is not base64, a Number that is not a number) comes back as a
    plain ``String`` holding the stored text, so a receive never fails on one
    message's attributes."""
    if not attributes or not wanted:
        return {}
    types = _stored_types(attributes.get(TYPES_ATTRIBUTE))
    out: dict[str, dict[str, Any]] = {}
    for name, value in attributes.items():
        if name.startswith(HIDDEN_PREFIXES) or not _selected(name, wanted):
            continue
        if not isinstance(value, str):
            continue
        data_type = types.get(name, "String")
        if data_type.startswith("Binary"):
            try:
                out[name] = {
                    "DataType": data_type,
                    "BinaryValue": base64.b64decode(value, validate=True),
                }
                continue
            except ValueError:
                data_type = "String"
        elif data_type.startswith("Number") and not number_ok(value):
            data_type = "String"
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
