"""The message objects of v2 request bodies: an enqueue's or publish's ``messages``
and a transaction's ``enqueue`` items, and the check every v2 body object makes
of its member names (:func:`refuse_unknown`).

A member a body does not take is refused, never ignored: a misspelled
``dedup_id`` would otherwise drop the idempotency it asked for, a misspelled
``delay_s`` the delay. Every malformed input raises
:class:`~dynaq.errors.InvalidInput` (422).
"""

from __future__ import annotations

import base64
import difflib
import json
import re
from collections.abc import Collection, Mapping
from typing import Any

from dynaq.api.codec import body_from_wire
from dynaq.core.messages import MAX_ATTRIBUTES, TYPES_ATTRIBUTE, NewMessage
from dynaq.errors import InvalidInput
from dynaq.services.queue_records import MAX_DELAY_S

MESSAGE_MEMBERS = ("body", "encoding", "attributes", "group", "dedup_id", "delay_s")
"""The members of a message object (only ``body`` is required)."""
SEND_MEMBERS = ("messages",)
"""The members of an enqueue's or publish's body."""


def _unknown(name: Any, members: Collection[Any]) -> str:
    text = str(name)
    known = [m for m in members if isinstance(m, str)]
    close = difflib.get_close_matches(text, known, n=1)
    return f"{text!r}" + (f" (did you mean {close[0]!r}?)" if close else "")


def refuse_unknown(obj: Mapping[Any, Any], members: Collection[Any], where: str = "") -> None:
    """Refuse (422) a member of ``obj`` that is not one of ``members``, naming it, where
    it is (``where``, e.g. ``messages[3]``; the body itself when empty), the member
    it likely misspells and what ``obj`` takes."""
    unknown = [k for k in obj if k not in members]
    if not unknown:
        return
    what = "unknown member" if len(unknown) == 1 else "unknown members"
    names = ", ".join(_unknown(k, members) for k in unknown)
    at = f"{where}: " if where else ""
    raise InvalidInput(f"{at}{what} {names}; expected {', '.join(map(str, members))}")


def _attributes(item: Mapping[str, Any], where: str) -> dict[str, str] | None:
    attrs = item.get("attributes")
    if attrs is None:
        return None
    if not isinstance(attrs, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in attrs.items()
    ):
        raise InvalidInput(f"{where}.attributes must be an object of string values")
    if len(attrs) > MAX_ATTRIBUTES:
        raise InvalidInput(f"{where}.attributes holds at most {MAX_ATTRIBUTES} entries")
    if "" in attrs:  # no SQS or SNS receiver could be given it (their names are 1..256)
        raise InvalidInput(f"{where}.attributes: a name must not be empty")
    if TYPES_ATTRIBUTE in attrs:
        _check_types(attrs, f"{where}.attributes")
    return dict(attrs)


_SQS_TYPE = re.compile(r"(String|Number|Binary)(\.[^\x00-\x1f]{1,250})?")


def _check_types(attrs: Mapping[str, str], where: str) -> None:
    """``aws.types`` names the SQS/SNS data type of other attributes (as SQS and SNS
    store it): a message may carry it, as one received through SQS does, but only
    well formed, since the SQS and SNS views of the message read it."""
    try:
        types = json.loads(attrs[TYPES_ATTRIBUTE])
    except ValueError:
        types = None
    if not isinstance(types, dict):
        raise InvalidInput(f"{where}[{TYPES_ATTRIBUTE!r}] must be a JSON object: name → data type")
    for name, kind in types.items():
        if name not in attrs or name == TYPES_ATTRIBUTE:
            raise InvalidInput(f"{where}[{TYPES_ATTRIBUTE!r}] names {name!r}, which is not set")
        if not isinstance(kind, str) or not _SQS_TYPE.fullmatch(kind):
            raise InvalidInput(
                f"{where}[{TYPES_ATTRIBUTE!r}]: {name!r} has type {kind!r}; "
                "String, Number or Binary (with an optional .label)"
            )
        if kind.startswith("Binary"):
            try:
                base64.b64decode(attrs[name], validate=True)
            except ValueError:
                raise InvalidInput(
                    f"{where}[{name!r}] is typed Binary and must be base64"
                ) from None


def _tag(item: Mapping[str, Any], name: str, where: str) -> str | None:
    value = item.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{where}.{name} must be a string")
    return value


def _delay(item: Mapping[str, Any], where: str) -> float | None:
    value = item.get("delay_s")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{where}.delay_s must be a number")
    if not 0 <= value <= MAX_DELAY_S:  # also refuses NaN and infinities
        raise InvalidInput(f"{where}.delay_s must be in 0..{MAX_DELAY_S} seconds")
    return float(value)


def _plain_bodies(items: list[Any]) -> list[bytes] | None:
    """The bodies when every item is exactly ``{"body": <bytes>}``, else None.

    One comprehension instead of a checked loop: this is most of the parsing
    cost of a msgpack batch. Anything else takes the checked path.
    """
    try:
        bodies = [item["body"] for item in items if type(item) is dict and len(item) == 1]
    except KeyError:
        return None
    if len(bodies) != len(items) or not all(type(b) is bytes for b in bodies):
        return None
    return bodies


def new_messages(body: Mapping[str, Any], binary: bool, max_batch: int) -> list[NewMessage]:
    """The ``messages`` member of a v2 enqueue or publish (the caller checks the body's
    other members: :data:`SEND_MEMBERS`)."""
    items = body.get("messages")
    if not isinstance(items, list) or not items:
        raise InvalidInput("messages must be a non-empty array")
    if len(items) > max_batch:
        raise InvalidInput(f"a batch holds at most {max_batch} messages, got {len(items)}")
    if binary:
        bodies = _plain_bodies(items)
        if bodies is not None:  # the hot path: every item is {"body": <bytes>}
            return [NewMessage(b) for b in bodies]
    return [new_message(item, binary, f"messages[{i}]") for i, item in enumerate(items)]


def new_message(
    item: Any, binary: bool, where: str, members: Collection[Any] = MESSAGE_MEMBERS
) -> NewMessage:
    """One message object of a v2 enqueue, publish or transaction (``where`` names it
    in errors); a member not in ``members`` is refused (a transaction's item adds
    ``queue``, which its caller reads)."""
    if not isinstance(item, Mapping):
        raise InvalidInput(f"{where} must be an object")
    refuse_unknown(item, members, where)
    group = _tag(item, "group", where)
    delay_s = _delay(item, where)
    if group is not None and delay_s is not None:
        # Group order is id order, drawn at the enqueue: a delay per message would
        # let a later message of the group overtake it (SQS FIFO refuses it too).
        raise InvalidInput(
            f"{where}: a group message cannot carry its own delay_s; set the queue's"
        )
    return NewMessage(
        body_from_wire(dict(item), binary, where),
        _attributes(item, where),
        group=group,
        dedup_id=_tag(item, "dedup_id", where),
        delay_s=delay_s,
    )
