"""What SNS checks of a Publish or PublishBatch before anything is delivered.

* ``Subject``, when given: 1..99 printable ASCII characters, not starting with a
  space (SNS: "less than 100 characters", no line breaks or control characters).
* ``Message``: non-empty, and without NUL (``#x0``), which no queue could hold
  as text.
* Message attributes, as SNS checks them (code ``ParameterValueInvalid``, what
  botocore maps to ``InvalidParameterValueException``): every entry has a
  ``Name``; names are at most 256 characters of ``A-Za-z0-9_.-``, not starting
  or ending with ``.``, without ``..``, not starting with ``AWS.`` or
  ``Amazon.`` in any casing; the data type is ``String``, ``Number`` or
  ``Binary`` (with an optional ``.label``), and carries its field
  (``StringValue``, or ``BinaryValue`` for ``Binary``), non-empty; a
  ``Number`` is a finite decimal of at most 38 significant digits between
  10^-128 and 10^126 in magnitude (or 0); a ``String.Array`` is a JSON array;
  string values hold only XML 1.0's characters (#x9 | #xA | #xD | #x20-#xD7FF
  | #xE000-#xFFFD | #x10000-#x10FFFF).
* ``MessageGroupId`` / ``MessageDeduplicationId``: 1..128 characters of
  printable ASCII without space.
* PublishBatch: every entry Id is 1..80 letters, digits, ``-`` or ``_``
  (``InvalidBatchEntryId``), distinct (``BatchEntryIdsNotDistinct``); all the
  messages with their attributes together fit the node's
  ``http.max_message_bytes`` (``BatchRequestTooLong``). Whatever is wrong with
  one entry otherwise fails that entry, in ``Failed``, with its own code.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from dynaq.api.aws.query_wire import QueryError, invalid
from dynaq.api.aws.sqs_validation import NOT_ALLOWED, number_ok
from dynaq.api.codec import parse_json
from dynaq.errors import InvalidInput

# SNS's rule for a Subject: printable ASCII that does not start with a space,
# under 100 characters.
_SUBJECT = re.compile(r"[!-~][ -~]{0,98}")
_TAG = re.compile(r"[!-~]{1,128}")
_ENTRY_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_RESERVED = ("aws.", "amazon.")
_ALLOWED_TEXT = "#x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF"
MAX_NAME = 256


def value_invalid(message: str) -> QueryError:
    """SNS's InvalidParameterValueException (wire code ``ParameterValueInvalid``)."""
    return QueryError("ParameterValueInvalid", message)


def check_subject(subject: str | None) -> None:
    if subject is not None and not _SUBJECT.fullmatch(subject):
        raise invalid(
            "Subject: 1..99 printable ASCII characters, not starting with a space, "
            "no line breaks or control characters"
        )


def check_message(body: str) -> None:
    if "\x00" in body:
        raise invalid("Message: Invalid character '#x0' was found in the message")


def check_tag(name: str, value: str | None) -> None:
    if value is not None and not _TAG.fullmatch(value):
        raise invalid(
            f"{name} Reason: 1..128 characters of letters, digits and punctuation (ASCII 33..126)"
        )


def structured(message: str) -> str:
    """``MessageStructure=json``: the message is a JSON object of one string per
    protocol; a queue gets its ``sqs`` entry, else the ``default`` one (required)."""
    try:
        per_protocol = parse_json(message.encode())
    except InvalidInput:
        raise invalid("Message Structure - JSON message body failed to parse") from None
    if not isinstance(per_protocol, dict):
        raise invalid("Message Structure - JSON message body failed to parse")
    if "default" not in per_protocol:
        raise invalid("Message Structure - No default entry in JSON message body")
    chosen = per_protocol.get("sqs", per_protocol["default"])
    if not isinstance(chosen, str) or not chosen:
        raise invalid(
            "Message Structure - the entry for sqs (or default) must be a non-empty string"
        )
    return chosen


def _check_name(name: str) -> None:
    if not name:
        raise value_invalid("The message attribute name must not be empty.")
    if len(name) > MAX_NAME:
        raise value_invalid(f"Length of message attribute name must be less than {MAX_NAME} bytes.")
    if not _NAME.fullmatch(name):
        bad = next(c for c in name if not _NAME.fullmatch(c))
        raise value_invalid(
            f"Invalid non-alphanumeric character '#x{ord(bad):X}' was found in the message "
            "attribute name. Can only include alphanumeric characters, hyphens, "
            "underscores, or dots."
        )
    if name.startswith("."):
        raise value_invalid("Invalid message attribute name starting with character '.' was found.")
    if name.endswith("."):
        raise value_invalid("Invalid message attribute name ending with character '.' was found.")
    if ".." in name:
        raise value_invalid("Message attribute name can not have successive '.' character.")
    if name.lower().startswith(_RESERVED):
        raise value_invalid(
            f"The message attribute name '{name}' is reserved: names cannot start with "
            "'AWS.' or 'Amazon.' (in any casing)."
        )


def _check_number(name: str, value: str) -> None:
    # The same rule as SQS's (one implementation: sqs_validation.number_ok).
    if not number_ok(value):
        raise value_invalid(
            f"Could not cast message attribute '{name}' value to number: a Number has at "
            "most 38 digits of precision, between 10^-128 and 10^+126."
        )


def check_attributes(attrs: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse what SNS refuses of message attributes (see the module docstring)."""
    for name, a in attrs.items():
        _check_name(name)
        data_type = str(a.get("DataType", ""))
        base = data_type.split(".", 1)[0]
        if base not in ("String", "Number", "Binary") or data_type.endswith("."):
            raise value_invalid(
                f"The message attribute '{name}' has an invalid message attribute type, "
                "the set of supported type prefixes is Binary, Number, and String."
            )
        field = "BinaryValue" if base == "Binary" else "StringValue"
        other = "StringValue" if base == "Binary" else "BinaryValue"
        if field not in a and other in a:
            raise value_invalid(
                f"The message attribute '{name}' with type '{data_type}' must use field "
                f"'{field[: -len('Value')]}'."
            )
        value = a.get(field)
        if not value:
            raise value_invalid(
                f"The message attribute '{name}' must contain non-empty message attribute "
                f"value for message attribute type '{data_type}'."
            )
        if base == "Binary":
            continue
        bad = NOT_ALLOWED.search(value)
        if bad is not None:
            raise value_invalid(
                f"Invalid character '#x{ord(bad.group()):X}' was found in the value of message "
                f"attribute '{name}', the set of allowed characters is {_ALLOWED_TEXT}."
            )
        if base == "Number":
            _check_number(name, value)
        elif data_type == "String.Array" and not _is_json_array(value):
            raise value_invalid(
                f"The message attribute '{name}' with type 'String.Array' must hold a JSON "
                "array (of strings, numbers, true, false or null)."
            )


def _is_json_array(value: str) -> bool:
    try:
        parsed = parse_json(value.encode())
    except (InvalidInput, UnicodeEncodeError):
        return False
    return isinstance(parsed, list)


def check_entry_ids(ids: Sequence[str | None]) -> None:
    for i in ids:
        if i is None or not _ENTRY_ID.fullmatch(i):
            raise QueryError(
                "InvalidBatchEntryId",
                "The Id of a batch entry in a batch request doesn't abide by the "
                "specification: 1..80 letters, digits, hyphens and underscores.",
            )
    if len(set(ids)) != len(ids):
        raise QueryError(
            "BatchEntryIdsNotDistinct", "Two or more batch entries in the request have the same Id."
        )


def entry_bytes(entry: Mapping[str, str]) -> int:
    """What one batch entry counts toward the batch's size: its message and its
    attributes' names, types and values (binary values decoded)."""
    size = len(entry.get("Message", "").encode())
    for key, value in entry.items():
        if not key.startswith("MessageAttributes."):
            continue
        n = len(value.encode())
        if key.endswith(".BinaryValue"):
            size += n * 3 // 4
        elif key.endswith((".Name", ".DataType", ".StringValue")):
            size += n
    return size


def check_batch_size(entries: Sequence[Mapping[str, str]], limit: int) -> None:
    if sum(entry_bytes(e) for e in entries) > limit:
        raise QueryError(
            "BatchRequestTooLong",
            f"The length of all the messages put together is more than the limit ({limit} bytes).",
        )


def failed_entry(entry_id: str, exc: Exception) -> dict[str, Any]:
    """A batch entry's failure in PublishBatch's ``Failed`` list."""
    if isinstance(exc, QueryError):
        return {"Id": entry_id, "Code": exc.code, "Message": exc.message, "SenderFault": True}
    message = getattr(exc, "message", str(exc))
    return {
        "Id": entry_id,
        "Code": "InvalidParameter",
        "Message": f"Invalid parameter: {message}",
        "SenderFault": True,
    }
