"""Messages as the queue service sees them, and their stored encoding.

A stored value is a msgpack array ``[flags, body, enqueued_ms, attributes]``;
bit 0 of ``flags`` says the body is zlib-compressed (per queue setting, body
only). Old values stay readable when a queue's compression setting changes,
because the flag travels with each message.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import msgpack

from dynaq.errors import StorageError

FLAG_ZLIB = 1

# One packer for the event loop thread: msgpack.packb builds a new Packer per call.
_packer = msgpack.Packer()


@dataclass(frozen=True, slots=True)
class NewMessage:
    """A message to enqueue.

    ``group``: messages of one group are delivered in enqueue order, one at a
    time (SQS FIFO's MessageGroupId). ``dedup_id``: a second enqueue with the
    same id into the same queue within the dedup window returns the first
    message's id instead of enqueueing again (SQS's MessageDeduplicationId).
    """

    body: bytes
    attributes: dict[str, str] | None = None
    group: str | None = None
    dedup_id: str | None = None


@dataclass(slots=True)
class Message:
    """A stored message as returned to clients."""

    id: int
    body: bytes
    enqueued_ms: int
    attributes: dict[str, str] | None = None
    receive_count: int = 0
    group: str | None = None


def encode(msg: NewMessage, enqueued_ms: int, compress: bool) -> bytes:
    body = msg.body
    flags = 0
    if compress:
        body = zlib.compress(body)
        flags |= FLAG_ZLIB
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
    body, enqueued_ms, attributes, group = decode_fields(message_id, raw)
    return Message(message_id, body, enqueued_ms, attributes, receive_count, group)
