"""Typed, persistent, append-only streams (Sherlock): schema, segment files, listeners.

A stream is declared with a JSON Schema and an order key; appends are
validated, numbered 0, 1, 2... and fsync'd before they are acknowledged;
listeners replay from an index, an order key or the tail, then follow live.
See :mod:`dynaq.streams.service` for the guarantees and
:mod:`dynaq.streams.segments` for the file format.
"""

from dynaq.streams.listen import CONTENT_TYPES, FORMATS, Chunk, Stops
from dynaq.streams.schema import EntryType, signature_of
from dynaq.streams.service import StreamInfo, StreamService
from dynaq.streams.subscriptions import Start, Subscription

__all__ = [
    "CONTENT_TYPES",
    "FORMATS",
    "Chunk",
    "EntryType",
    "Start",
    "Stops",
    "StreamInfo",
    "StreamService",
    "Subscription",
    "signature_of",
]
