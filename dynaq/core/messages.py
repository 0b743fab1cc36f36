"""Messages as the queue service sees them, and their stored encoding.

A stored value is a msgpack array ``[flags, body, enqueued_ms, attributes]``,
then optionally ``group`` and a dead-lettered message's ``origin``
(``[queue, id, receive_count, enqueued_ms, dead_lettered_ms]``);
bit 0 of ``flags`` says the body is zlib-compressed (per queue setting, body
only). Old values stay readable when a queue's compression setting changes,
because the flag travels with each message.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import msgpack

from dynaq.errors import StorageError

FLAG_ZLIB = 1

_T = TypeVar("_T")

# One packer for the event loop thread: msgpack.packb builds a new Packer per call.
_packer = msgpack.Packer()


MAX_ATTRIBUTES = 32
"""Most attributes one message may carry (every API, and the outbox relay's rows)."""

HIDDEN_ATTRIBUTE_PREFIXES = ("aws.", "dynaq.")
"""Attributes dynaq keeps for itself: never shown as a message's SQS/SNS attributes."""
TYPES_ATTRIBUTE = "aws.types"
"""SQS/SNS data types other than ``String`` of a message's attributes (JSON)."""
SUBJECT_ATTRIBUTE = "aws.subject"
"""An SNS publish's Subject, carried with the message."""


@dataclass(frozen=True, slots=True)
class DeadLetterOrigin:
    """Where a dead-lettered message came from: its queue and id there, how often
    it was received there, when it was first enqueued and when it was moved."""

    queue: str
    message_id: int
    receive_count: int
    enqueued_ms: int
    dead_lettered_ms: int


if TYPE_CHECKING:
    from typing_extensions import dataclass_transform

    @dataclass_transform(frozen_default=True)
    def _value_class(cls: type[_T]) -> type[_T]: ...

else:

    def _value_class(cls):
        """A slotted dataclass, frozen to the type checker only: a frozen dataclass
        sets each field through object.__setattr__ (0.75 us a message against
        0.15 us), about a tenth of a batched enqueue's event-loop CPU, while mypy
        --strict refuses an assignment either way."""
        return dataclass(slots=True)(cls)


@_value_class
class NewMessage:
    """A message to enqueue.

    ``group``: messages of one group are delivered in enqueue order, one at a
    time (SQS FIFO's MessageGroupId). ``dedup_id``: a second enqueue with the
    same id into the same queue within the dedup window returns the first
    message's id instead of enqueueing again (SQS's MessageDeduplicationId).
    ``delay_s``: invisible until this long after the enqueue (SQS's DelaySeconds).
    """

    body: bytes
    attributes: dict[str, str] | None = None
    group: str | None = None
    dedup_id: str | None = None
    origin: DeadLetterOrigin | None = None
    """Set only when the queue service moves a message to a dead-letter queue."""
    delay_s: float | None = None
    """Invisible for this long after the enqueue (None: the queue's ``delay_s``)."""


@dataclass(slots=True)
class Message:
    """A stored message as returned to clients."""

    id: int
    body: bytes
    enqueued_ms: int
    attributes: dict[str, str] | None = None
    receive_count: int = 0
    group: str | None = None
    origin: DeadLetterOrigin | None = None
    delivery: int = 0
    """The delivery this receive is (its receipt names it); 0 outside a receive."""
    first_received_ms: int = 0
    """Wall-clock ms of its first delivery, as far as its node knows (0: unknown)."""


def encode(msg: NewMessage, enqueued_ms: int, compress: bool) -> bytes:
    body = msg.body
    flags = 0
    if compress:
        body = zlib.compress(body)
        flags |= FLAG_ZLIB
    if msg.origin is not None:
        o = msg.origin
        origin = [o.queue, o.message_id, o.receive_count, o.enqueued_ms, o.dead_lettered_ms]
        return bytes(_packer.pack([flags, body, enqueued_ms, msg.attributes, msg.group, origin]))
    if msg.group is None:
        return bytes(_packer.pack([flags, body, enqueued_ms, msg.attributes]))
    return bytes(_packer.pack([flags, body, enqueued_ms, msg.attributes, msg.group]))


_unpackb = msgpack.unpackb


def decode_fields(
    message_id: int, raw: bytes
) -> tuple[bytes, int, dict[str, str] | None, str | None]:
    """``(body, enqueued_ms, attributes, group)`` of a stored value, body decompressed.

    The one reader of the stored layout: :func:`decode` and the snapshot pages
    (which build columns, not :class:`Message` objects) both use it.
    """
    try:
        fields = _unpackb(raw)
        flags, body = fields[0], fields[1]
        if flags & FLAG_ZLIB:
            body = zlib.decompress(body)
        return body, fields[2], fields[3], fields[4] if len(fields) > 4 else None
    # LookupError, not just IndexError: a corrupt value may decode to a map, and
    # indexing a map by 0 is a KeyError.
    except (ValueError, TypeError, LookupError, zlib.error, msgpack.UnpackException) as exc:
        raise StorageError(f"message {message_id} is corrupt: {exc}") from exc


def decode(message_id: int, raw: bytes, receive_count: int = 0) -> Message:
    """The stored value of message ``message_id`` as a :class:`Message`."""
    try:
        fields = _unpackb(raw)
        if len(fields) == 4 and not fields[0] & FLAG_ZLIB:
            # The common value (no group, no origin, not compressed), read once.
            return Message(message_id, fields[1], fields[2], fields[3], receive_count)
    except (ValueError, TypeError, LookupError, msgpack.UnpackException):
        pass  # corrupt: decode_fields raises the StorageError
    body, enqueued_ms, attributes, group = decode_fields(message_id, raw)
    msg = Message(message_id, body, enqueued_ms, attributes, receive_count, group)
    if raw[0] == 0x96:  # a six-member fixarray: a dead-lettered message with its origin
        try:
            o = _unpackb(raw)[5]
            msg.origin = DeadLetterOrigin(str(o[0]), int(o[1]), int(o[2]), int(o[3]), int(o[4]))
        except (ValueError, TypeError, LookupError, msgpack.UnpackException) as exc:
            raise StorageError(f"message {message_id} is corrupt: {exc}") from exc
    return msg
