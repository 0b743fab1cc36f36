"""The AWS Query protocol's wire format (what botocore uses for SNS): form-encoded
requests with flattened members, XML responses and errors."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

from aiohttp import web

SNS_NS = "http://sns.amazonaws.com/doc/2010-03-31/"


class QueryError(Exception):
    """An error in the Query protocol's shape: ``code`` (botocore maps its modeled
    exceptions by it), the HTTP status and who is at fault."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status

    def response(self) -> web.Response:
        side = "Sender" if self.status < 500 else "Receiver"
        body = (
            f'<ErrorResponse xmlns="{SNS_NS}"><Error><Type>{side}</Type>'
            f"<Code>{escape(self.code)}</Code><Message>{escape(self.message)}</Message></Error>"
            f"<RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
        )
        return web.Response(status=self.status, text=body, content_type="text/xml")


def invalid(message: str) -> QueryError:
    return QueryError("InvalidParameter", f"Invalid parameter: {message}")


def not_found(message: str) -> QueryError:
    return QueryError("NotFound", message, status=404)


def entries(params: Mapping[str, str], prefix: str, key: str, value: str) -> dict[str, str]:
    """``Prefix.entry.N.key`` / ``.value`` pairs as a map."""
    out: dict[str, str] = {}
    pattern = re.compile(re.escape(prefix) + r"\.entry\.(\d+)\." + re.escape(key) + "$")
    for name, k in params.items():
        m = pattern.match(name)
        if m:
            v = params.get(f"{prefix}.entry.{m.group(1)}.{value}")
            if v is None:
                raise invalid(f"{prefix}.entry.{m.group(1)} has no {value}")
            out[k] = v
    return out


def members(params: Mapping[str, str], prefix: str) -> list[dict[str, str]]:
    """``Prefix.member.N.Field`` groups, in N order, each as ``{Field: value}``
    (nested fields keep their dotted tail)."""
    groups: dict[int, dict[str, str]] = {}
    pattern = re.compile(re.escape(prefix) + r"\.member\.(\d+)\.(.+)$")
    for name, v in params.items():
        m = pattern.match(name)
        if m:
            groups.setdefault(int(m.group(1)), {})[m.group(2)] = v
    return [groups[i] for i in sorted(groups)]


def message_attributes(
    params: Mapping[str, str], prefix: str = "MessageAttributes"
) -> dict[str, dict[str, Any]]:
    """``MessageAttributes.entry.N.Name`` / ``.Value.DataType`` / ``.Value.StringValue``
    (or ``BinaryValue``, base64) in SQS's shape; a value field absent stays absent
    (the caller says what each type needs). An entry without a ``Name``, or without
    a ``DataType``, is refused (never silently dropped)."""
    pattern = re.compile(re.escape(prefix) + r"\.entry\.(\d+)\.")
    numbers = sorted({int(m.group(1)) for k in params if (m := pattern.match(k))})
    out: dict[str, dict[str, Any]] = {}
    for n in numbers:
        base = f"{prefix}.entry.{n}."
        attr = params.get(base + "Name")
        if not attr:
            raise QueryError(
                "ParameterValueInvalid", f"The message attribute entry {n} must have a Name."
            )
        data_type = params.get(base + "Value.DataType")
        if data_type is None:
            raise invalid(
                f"The message attribute '{attr}' must contain non-empty message attribute type."
            )
        value: dict[str, Any] = {"DataType": data_type}
        for field in ("StringValue", "BinaryValue"):
            if base + "Value." + field in params:
                value[field] = params[base + "Value." + field]
        out[attr] = value
    return out


def xml(tag: str, value: Any) -> str:
    """``value`` as XML under ``tag``: maps as child elements, lists as ``member``s,
    the rest as escaped text."""
    if isinstance(value, Mapping):
        inner = "".join(xml(k, v) for k, v in value.items() if v is not None)
    elif isinstance(value, list):
        inner = "".join(xml("member", v) for v in value)
    elif isinstance(value, bool):
        inner = "true" if value else "false"
    else:
        inner = escape(str(value))
    return f"<{tag}>{inner}</{tag}>"


def attribute_entries(attrs: Mapping[str, str]) -> str:
    """A map as Query's ``<entry><key/><value/></entry>`` list."""
    return "".join(f"<entry>{xml('key', k)}{xml('value', v)}</entry>" for k, v in attrs.items())


def ok(action: str, result: str = "") -> web.Response:
    body = (
        f'<{action}Response xmlns="{SNS_NS}">'
        + (f"<{action}Result>{result}</{action}Result>" if result else "")
        + f"<ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId></ResponseMetadata>"
        f"</{action}Response>"
    )
    return web.Response(text=body, content_type="text/xml")


def query_form(request: web.Request, body: bytes) -> dict[str, str]:
    """The Query protocol's parameters, from the body as decoded (``Content-Encoding``
    undone by :func:`read_raw`; aiohttp's own form parser would read the bytes as sent)."""
    if request.content_type not in ("", "application/x-www-form-urlencoded"):
        return {}  # as aiohttp's parser: no form, no Action (InvalidAction)
    try:
        text = body.decode(request.charset or "utf-8")
        return dict(parse_qsl(text, keep_blank_values=True, strict_parsing=False))
    except (UnicodeDecodeError, ValueError):
        raise invalid("the body is not a form") from None
