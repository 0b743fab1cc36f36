"""Wire of the node-to-node routes that keep copies of streams (see
:mod:`dynaq.streams.replicas`): msgpack both ways, signed like every
``/internal/`` route."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DECLARED_PATH = "/internal/v1/streams/declared"
"""``{"stream"}`` → ``{"schema", "order_key", "signature"}``."""
FOLLOW_PATH = "/internal/v1/streams/follow"
"""``{"stream", "start"}`` → a chunked sequence of msgpack ``{index, order, entry}`` maps
(the listen route's msgpack format), replayed from ``start`` and then live."""
SIZE_PATH = "/internal/v1/streams/size"
"""``{"stream"}`` → ``{"size": n | null}``: how much of the stream this node holds."""
HISTORY_PATH = "/internal/v1/streams/history"
"""``{"stream", "entries"}``: a topic's history entries for the stream's authority to
stamp and append (answered once they count as acknowledged)."""
REPORT_PATH = "/internal/v1/streams/report"
"""``{"stream", "node", "size"}``: ``node`` holds ``size`` entries of the stream, fsync'd."""


@dataclass(frozen=True)
class Declared:
    """What a follower needs to hold a copy: the authority's declaration."""

    schema: dict[str, Any]
    order_key: str | None
    signature: str
