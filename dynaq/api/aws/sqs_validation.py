"""SQS's input rules, checked as AWS checks them and refused with its codes.

* Integers: JSON parameters (MaxNumberOfMessages, DelaySeconds, ...) must be JSON
  integers (``true`` is not 1); queue attribute values are strings of ASCII
  digits (``"1e3"``, ``" 5"``, ``"0.25"`` and ``"٣"`` are refused, though
  Python's ``int`` and ``float`` take some of them).
* Message attributes: AWS's name grammar (A-Z a-z 0-9 ``_ - .``, at most 256,
  no leading, trailing or doubled ``.``, no ``AWS.``/``Amazon.`` prefix), data
  types ``String``, ``Number`` or ``Binary`` with an optional ``.label``, values
  of the characters a body may hold, Numbers of at most 38 significant digits
  within 10^-128..10^126 in magnitude.
* Message group and deduplication ids: 1..128 ASCII alphanumerics and
  punctuation.
* Tags: keys of 1..128 characters, values of at most 256, at most 50 per queue.
"""

from __future__ import annotations

import base64
import re
from decimal import Decimal, InvalidOperation
from typing import Any, TypeGuard

from dynaq.api.aws.sqs_errors import SqsError, invalid

# What SQS lets a message body or attribute value hold (XML 1.0's characters):
# #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF.
NOT_ALLOWED = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_DIGITS = re.compile(r"[0-9]{1,12}")
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,6})?")
_ATTRIBUTE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,256}")
_DATA_TYPE = re.compile(r"(String|Number|Binary)(\..+)?", re.DOTALL)
_ID = re.compile(r"[!-~]{1,128}")
"""Message group and dedup ids: ASCII alphanumerics and punctuation (0x21..0x7E)."""
MAX_NAME = 256
MAX_DIGITS = 38
MAX_TAGS = 50
SYSTEM_ATTRIBUTES = ("AWSTraceHeader",)
"""What SendMessage's MessageSystemAttributes may hold."""


def is_int(value: object) -> TypeGuard[int]:
    """A JSON integer (a bool is an ``int`` to Python, not to SQS)."""
    return isinstance(value, int) and not isinstance(value, bool)


def int_param(name: str, value: object, lo: int, hi: int, reason: str = "") -> int:
    """A JSON integer parameter in ``lo..hi``, or InvalidParameterValue."""
    if is_int(value) and lo <= value <= hi:
        return value
    why = reason or f"Must be between {lo} and {hi}, if provided."
    raise invalid(f"Value {value} for parameter {name} is invalid. Reason: {why}")


def int_attribute(name: str, value: object, lo: int, hi: int) -> int:
    """A queue attribute holding an integer: a string of ASCII digits (or a JSON
    integer) in ``lo..hi``, or InvalidAttributeValue."""
    n: int | None = None
    if is_int(value):
        n = value
    elif isinstance(value, str) and _DIGITS.fullmatch(value):
        n = int(value)
    if n is None or not lo <= n <= hi:
        raise SqsError(
            "InvalidAttributeValue",
            f"Invalid value for the parameter {name}. Reason: must be an integer "
            f"between {lo} and {hi}.",
        )
    return n


def check_id(name: str, value: object) -> str:
    """A MessageGroupId or MessageDeduplicationId as AWS takes them."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise invalid(
            f"Value {value} for parameter {name} is invalid. Reason: {name} can only include "
            "alphanumeric and punctuation characters. 1 to 128 in length."
        )
    return value


def check_chars(what: str, value: str) -> None:
    bad = NOT_ALLOWED.search(value)
    if bad is not None:
        raise invalid(
            f"{what} contains the invalid character '#x{ord(bad.group()):X}'; the set of "
            "allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | "
            "#x10000 to #x10FFFF"
        )


def check_attribute_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise invalid("The request must contain non-empty message (user) attribute names.")
    if not _ATTRIBUTE_NAME.fullmatch(name):
        raise invalid(
            f"Message (user) attribute name '{name[:MAX_NAME]}' is invalid: use at most "
            f"{MAX_NAME} of A-Z, a-z, 0-9, underscore, hyphen and period."
        )
    if name.startswith(".") or name.endswith(".") or ".." in name:
        raise invalid(
            f"Message (user) attribute name '{name}' must not begin or end with '.' nor "
            "have successive '.' characters."
        )
    if name.lower().startswith(("aws.", "amazon.")):
        raise invalid(
            f"Message (user) attribute name '{name}' is invalid: names starting with "
            "'AWS.' or 'Amazon.' are reserved."
        )
    return name


def data_type_ok(data_type: object, max_len: int = MAX_NAME) -> bool:
    """``String``, ``Number`` or ``Binary``, optionally with a non-empty ``.label``."""
    return (
        isinstance(data_type, str)
        and len(data_type) <= max_len
        and _DATA_TYPE.fullmatch(data_type) is not None
        and NOT_ALLOWED.search(data_type) is None
    )


def check_data_type(name: str, data_type: object) -> str:
    if not isinstance(data_type, str) or not data_type:
        raise invalid(
            f"The message (user) attribute '{name}' must contain a non-empty message "
            "attribute type."
        )
    if not data_type_ok(data_type):
        raise invalid(
            f"The type of message (user) attribute '{name}' is invalid. You must use only "
            "the following supported type prefixes: Binary, Number, String (a custom "
            f"label after '.' must not be empty; at most {MAX_NAME} characters)."
        )
    return data_type


def number_ok(value: str) -> bool:
    """A number SQS stores: up to 38 significant digits, magnitude 10^-128..10^126."""
    if not _NUMBER.fullmatch(value):
        return False
    try:
        d = Decimal(value)
    except InvalidOperation:
        return False
    if d.is_zero():
        return True
    # Significant digits, counted exactly (normalize() would round to the context's 28).
    significant = "".join(map(str, d.as_tuple().digits)).strip("0")
    return len(significant) <= MAX_DIGITS and Decimal("1e-128") <= abs(d) <= Decimal("1e126")


def check_string_value(name: str, data_type: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise invalid(
            f"Message (user) attribute '{name}' must contain a non-empty value of type "
            f"'{data_type.split('.', 1)[0]}'."
        )
    check_chars(f"Message (user) attribute '{name}' value", value)
    if data_type.startswith("Number") and not number_ok(value):
        raise invalid(
            f"Can't cast '{value[:64]}' of attribute '{name}' to a number: use at most "
            f"{MAX_DIGITS} significant digits, between 10^-128 and 10^126."
        )
    return value


def check_binary_value(name: str, value: object) -> bytes:
    if not isinstance(value, str) or not value:
        raise invalid(
            f"Message (user) attribute '{name}' must contain a non-empty value of type 'Binary'."
        )
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise invalid(f"The message attribute '{name}' has a malformed BinaryValue.") from None


def check_system_attributes(raw: object) -> None:
    """MessageSystemAttributes: only AWSTraceHeader exists (a String). dynaq checks it
    and does not carry it (X-Ray has no equivalent here)."""
    if raw is None:
        return
    if not isinstance(raw, dict):
        raise invalid("MessageSystemAttributes must be a map.")
    for name, a in raw.items():
        if name not in SYSTEM_ATTRIBUTES:
            raise invalid(
                f"Message system attribute name '{name}' is invalid. Valid names: "
                f"{', '.join(SYSTEM_ATTRIBUTES)}."
            )
        if not isinstance(a, dict) or a.get("DataType") != "String":
            raise invalid(f"The message system attribute '{name}' must be of type 'String'.")
        check_string_value(name, "String", a.get("StringValue"))


def check_tags(tags: object, current: int = 0) -> dict[str, str]:
    """Tags to add (``current``: how many the queue has whose keys are not among them)."""
    if not isinstance(tags, dict):
        raise invalid("Tags must be a map of strings to strings.")
    for k, v in tags.items():
        if not isinstance(k, str) or not 1 <= len(k) <= 128:
            raise invalid(f"Tag key '{str(k)[:128]}' is invalid: 1 to 128 characters.")
        if not isinstance(v, str) or len(v) > 256:
            raise invalid(f"The value of tag '{k}' is invalid: a string of at most 256 characters.")
        check_chars(f"Tag '{k}'", k + v)
    if current + len(tags) > MAX_TAGS:
        raise invalid(f"Too many tags: a queue takes at most {MAX_TAGS}.")
    return dict(tags)


def payload_size(entry: Any) -> int:
    """What a SendMessageBatch entry adds to the request's payload: its body's and
    its attributes' bytes (names, types, values), as AWS counts them; what is not
    well formed counts as nothing (the entry fails on its own)."""
    if not isinstance(entry, dict):
        return 0
    body = entry.get("MessageBody")
    size = len(body.encode(errors="replace")) if isinstance(body, str) else 0
    attrs = entry.get("MessageAttributes")
    if isinstance(attrs, dict):
        for name, a in attrs.items():
            size += len(str(name).encode(errors="replace"))
            if not isinstance(a, dict):
                continue
            for key in ("DataType", "StringValue"):
                if isinstance(a.get(key), str):
                    size += len(a[key].encode(errors="replace"))
            if isinstance(a.get("BinaryValue"), str):
                size += len(a["BinaryValue"]) * 3 // 4
    return size


SYSTEM_ATTRIBUTE_NAMES = frozenset(
    ("All", "SenderId", "SentTimestamp", "ApproximateReceiveCount",
     "ApproximateFirstReceiveTimestamp", "SequenceNumber", "MessageDeduplicationId",
     "MessageGroupId", "AWSTraceHeader", "DeadLetterQueueSourceArn")
)  # fmt: skip
"""What ReceiveMessage's MessageSystemAttributeNames may name (botocore's enum)."""
QUEUE_ATTRIBUTES = frozenset(
    ("All", "Policy", "VisibilityTimeout", "MaximumMessageSize", "MessageRetentionPeriod",
     "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "CreatedTimestamp",
     "LastModifiedTimestamp", "QueueArn", "ApproximateNumberOfMessagesDelayed", "DelaySeconds",
     "ReceiveMessageWaitTimeSeconds", "RedrivePolicy", "FifoQueue", "ContentBasedDeduplication",
     "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "DeduplicationScope",
     "FifoThroughputLimit", "RedriveAllowPolicy", "SqsManagedSseEnabled")
)  # fmt: skip
"""Queue attribute names (botocore's QueueAttributeName enum)."""
