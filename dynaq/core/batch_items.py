"""Batch item ids (Carlyle's format): ``<batchId>:<blockId>:<index>``.

A producer adds N items to a batch and gets back blocks ``{id, upto}``; it
expands each block client-side into ``batchId:id:0 .. batchId:id:upto-1``.
Batch ids are decimal int64s, block ids UUIDs (as Carlyle's), indexes decimal.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from dynaq.errors import InvalidInput

MAX_BATCH_ID = 2**63 - 1

BATCH_ITEM_ATTRIBUTE = "dynaq.batch_item"
"""The message attribute that carries a batch item id; deleting the message acks the item."""


@dataclass(frozen=True, slots=True)
class ItemRef:
    """One parsed batch item id."""

    batch_id: int
    block: uuid.UUID
    index: int


def parse_batch_id(text: str) -> int:
    """A batch id from a URL or body; :class:`InvalidInput` if malformed."""
    t = text.strip()
    if not (t.isascii() and t.isdigit()) or len(t) > 19 or int(t) > MAX_BATCH_ID:
        raise InvalidInput(f"malformed batch id {text!r}: expected a decimal integer in [0, 2^63)")
    return int(t)


def parse_item_id(text: object) -> ItemRef:
    """Parse ``batchId:blockId:index``; :class:`InvalidInput` names what is wrong."""
    if not isinstance(text, str):
        raise InvalidInput("batch item ids must be strings 'batchId:blockId:index'")
    parts = text.split(":")
    if len(parts) != 3:
        raise InvalidInput(f"malformed batch item id {text!r}: expected 'batchId:blockId:index'")
    batch_id = parse_batch_id(parts[0])
    try:
        block = uuid.UUID(parts[1])
    except ValueError:
        raise InvalidInput(f"malformed batch item id {text!r}: block id is not a UUID") from None
    idx = parts[2]
    if not (idx.isascii() and idx.isdigit()) or len(idx) > 10:
        raise InvalidInput(f"malformed batch item id {text!r}: index is not a small integer")
    return ItemRef(batch_id, block, int(idx))


def item_id(batch_id: int, block: uuid.UUID, index: int) -> str:
    """Format one item id (what clients do when they expand a block)."""
    return f"{batch_id}:{block}:{index}"
