"""Receipts: handles that name one message and one delivery of it.

A receive hands out, per message, a receipt encoding the message id and the
delivery number the serving node drew for that receive. Deleting or changing
visibility with a receipt acts only while that delivery is the message's
latest: once the message has been served again (its visibility ran out and
another consumer received it), an earlier receipt is *stale* and is refused
per item, so a slow consumer cannot delete or extend the new delivery (SQS's
receipt-handle semantics). Bare ids keep Dynamiq's contract and act on
whatever delivery is current.
"""

from __future__ import annotations

import base64
import binascii
import struct

from dynaq.core.ids import is_valid_id
from dynaq.errors import InvalidInput

_LAYOUT = struct.Struct(">QQ")
_LENGTH = 22  # base64url of 16 bytes, unpadded


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def encode_receipt(message_id: int, delivery: int) -> str:
    """The receipt of ``delivery`` of ``message_id`` (opaque to clients): unpadded
    base64url of the two numbers."""
    # binascii directly: one per received message, and base64.urlsafe_b64encode
    # adds two Python calls around the same C code.
    raw = binascii.b2a_base64(_LAYOUT.pack(message_id, delivery), newline=False)
    return raw.translate(_URLSAFE)[:_LENGTH].decode()


def encode_receipts(pairs: list[tuple[int, int]]) -> list[str]:
    """:func:`encode_receipt` of each ``(message_id, delivery)``, in one base64 pass:
    each pair packed into 18 bytes (two zero bytes after its 16) encodes to 24
    characters, of which the first 22 are its receipt (the zero bits that close
    an unpadded encoding are the same)."""
    if not pairs:
        return []
    raw = struct.pack(">" + "QQ2x" * len(pairs), *[x for pair in pairs for x in pair])
    text = binascii.b2a_base64(raw, newline=False).translate(_URLSAFE).decode()
    return [text[i : i + _LENGTH] for i in range(0, len(text), 24)]


def decode_receipt(receipt: object) -> tuple[int, int]:
    """``(message_id, delivery)`` from a receipt; :class:`InvalidInput` if malformed."""
    if not isinstance(receipt, str) or len(receipt) != _LENGTH:
        raise InvalidInput(f"malformed receipt {str(receipt)[:40]!r}")
    try:
        message_id, delivery = _LAYOUT.unpack(base64.urlsafe_b64decode(receipt + "=="))
    except (binascii.Error, ValueError, struct.error):
        raise InvalidInput(f"malformed receipt {receipt!r}") from None
    if not is_valid_id(message_id) or delivery == 0:
        raise InvalidInput(f"malformed receipt {receipt!r}")
    return int(message_id), int(delivery)
