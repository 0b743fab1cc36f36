"""A background queue task's progress record (``t/`` + task id, JSON), as stored and shown."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

STALE_MS = 60_000
"""A running task whose record is older than this reads ``interrupted``: its node is gone."""


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """A task's progress as stored and shown."""

    id: str
    kind: str
    queue: str
    state: str
    moved: int
    skipped: int
    node: str
    started_at_ms: int
    updated_at_ms: int
    to_queue: str | None = None
    max_per_s: int = 0
    cursor: int = 0
    """Redrive: the next id to look at. Purge: the next lane."""
    error: str | None = None
    ahead: dict[str, int] | None = None
    """Purge: lanes whose hybrid clock had run past the start, with the first id to keep."""

    def public(self, now_ms: int) -> dict[str, Any]:
        out = asdict(self)
        del out["cursor"]
        del out["ahead"]
        if out["error"] is None:
            del out["error"]
        if self.state == "running" and now_ms - self.updated_at_ms > STALE_MS:
            out["state"] = "interrupted"
        return out

    def encode(self) -> bytes:
        return json.dumps(asdict(self)).encode()


def decode_task(raw: bytes) -> TaskRecord:
    return TaskRecord(**json.loads(raw))
