"""A stream's own retention limits, as declared (``PUT /v2/streams/{name}`` with
``retention``): the oldest finalized segment files go once the finalized ones hold
more than ``max_bytes`` or the oldest is older than ``max_age_s`` (0: no limit);
the newest finalized file always stays (see :meth:`dynaq.streams.stream.Stream._io_retain`).
Without its own limits a stream keeps the node's ``streams.retention_max_*``."""

from __future__ import annotations

from typing import Any

from dynaq.errors import InvalidInput

MAX_AGE_S = 100 * 365 * 86_400


def parse_retention(raw: Any) -> dict[str, float]:
    """``{"max_bytes"?: int >= 0, "max_age_s"?: number >= 0}`` (0: no limit), checked
    member by member; :class:`InvalidInput` otherwise."""
    if not isinstance(raw, dict):
        raise InvalidInput("retention is an object: {max_bytes?, max_age_s?}")
    extra = sorted(set(raw) - {"max_bytes", "max_age_s"})
    if extra:
        raise InvalidInput(f"unknown retention member {extra[0]!r}; expected max_bytes, max_age_s")
    out: dict[str, float] = {}
    mb = raw.get("max_bytes")
    if mb is not None:
        if isinstance(mb, bool) or not isinstance(mb, int) or not 0 <= mb <= 2**62:
            raise InvalidInput("retention.max_bytes is an integer in 0..2^62")
        out["max_bytes"] = mb
    age = raw.get("max_age_s")
    if age is not None:
        ok = isinstance(age, int | float) and not isinstance(age, bool)
        if not ok or not 0 <= age <= MAX_AGE_S:
            raise InvalidInput("retention.max_age_s is a number of seconds in 0..100 years")
        out["max_age_s"] = float(age)
    return out
