"""A queue's settings as the client reads and writes them (``GET /v2/queues/:queue``,
``PUT``/``PATCH /v1/queues/:queue``), and as definitions files hold them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

_NUMBER = (int, float)
_TYPES: dict[str, tuple[type, ...]] = {
    "visibility_timeout_s": _NUMBER,
    "min_partitions": (int,),
    "max_partitions": (int,),
    "max_partition_age_s": _NUMBER,
    "compressed_messages": (bool,),
    "redrive_policy": (Mapping,),
    "delay_s": _NUMBER,
    "retention_s": _NUMBER,
    "receive_wait_s": _NUMBER,
    "max_message_bytes": (int,),
    "fifo": (bool,),
    "content_based_dedup": (bool,),
    "tags": (Mapping,),
}


def _finite(name: str, value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"queue setting {name}: {value!r} is not a finite number")


@dataclass(frozen=True)
class QueueSettings:
    """A queue's settings; ``None`` means "leave as it is" in an update (so a
    redrive policy is set or kept here, not removed).

    Field names are the v2 names; :meth:`patch` gives v1's ``PATCH`` keys.
    ``fifo`` is taken at creation only (a change later is refused).
    """

    visibility_timeout_s: float | None = None
    min_partitions: int | None = None
    max_partitions: int | None = None
    max_partition_age_s: float | None = None
    compressed_messages: bool | None = None
    redrive_policy: Mapping[str, Any] | None = None
    """``{"dead_letter_queue": name, "max_receive_count": n}``."""
    delay_s: float | None = None
    retention_s: float | None = None
    receive_wait_s: float | None = None
    max_message_bytes: int | None = None
    fifo: bool | None = None
    content_based_dedup: bool | None = None
    tags: Mapping[str, str] | None = None

    _V1 = {
        "visibility_timeout_s": "visibility_timeout",
        "max_partition_age_s": "max_partition_age",
    }

    def patch(self) -> dict[str, Any]:
        """The v1 ``PATCH`` body that sets the fields that are not ``None``; a NaN or
        an infinity is a ``ValueError`` naming its setting (JSON cannot carry it)."""
        out = self.as_dict()
        for name, value in out.items():
            _finite(name, value)
        return {self._V1.get(k, k): v for k, v in out.items()}

    def as_dict(self) -> dict[str, Any]:
        """The fields that are set, by v2 name (what definitions files hold)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = dict(value) if isinstance(value, Mapping) else value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QueueSettings:
        """From v2 names; an unknown name, a value of the wrong type or a number
        that is not finite is a ``ValueError`` naming it (ranges are the node's to
        check)."""
        unknown = set(data) - set(_TYPES)
        if unknown:
            raise ValueError(f"unknown queue settings: {', '.join(sorted(unknown))}")
        for name, value in data.items():
            wrong_bool = isinstance(value, bool) and bool not in _TYPES[name]
            if value is not None and (wrong_bool or not isinstance(value, _TYPES[name])):
                raise ValueError(f"queue setting {name}: {value!r:.60} is not of its type")
            _finite(name, value)
        return cls(**{k: v for k, v in data.items() if v is not None})

    @classmethod
    def from_wire(cls, got: Mapping[str, Any]) -> QueueSettings:
        """The settings in a ``GET /v2/queues/:queue`` answer."""
        return cls(**{k: got[k] for k in _TYPES if got.get(k) is not None})
