"""What a processor writes to its backing stream, the delivery hash, and the metadata
member its outputs carry.

Records (JSON objects, member ``t`` names the type; Cues' ``:q/type``):

``snapshot``        ``{"t", "proc", "tailers": {input: index}}`` — first attempt of a step
``snapshot-alts``   ``{"t", "tailer": input}`` — the input an alts (or an imperative
                    processor's read) took on the first attempt, one per read, in order
``attempt-output``  ``{"t", "hash", "slot", "stream", "index", "writes", "next"}`` — slot
``attempt-error``   ``slot`` of the step's ``writes`` is about to be appended to
                    ``stream`` at exactly ``index``; ``writes`` is the whole plan
                    (``[{"stream", "error", "entry"}]``), ``next`` the tailers after
                    the step
``attempt-nil``     ``{"t", "hash", "next"}`` — delivered with nothing to write
``position``        ``{"t", "tailers"}`` — at-least/at-most-once committed positions
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

META = "_cues"
"""The member of an output (or error) entry that holds ``{"hash", "slot", "proc"}``:
the entry's own members stay top-level, as the user function returned them."""

SNAPSHOT = "snapshot"
SNAPSHOT_ALTS = "snapshot-alts"
ATTEMPT_OUTPUT = "attempt-output"
ATTEMPT_ERROR = "attempt-error"
ATTEMPT_NIL = "attempt-nil"
POSITION = "position"
ATTEMPTS = (ATTEMPT_OUTPUT, ATTEMPT_ERROR)
BACKING_SCHEMA: dict[str, Any] = {"type": "object", "required": ["t"]}

Tailers = dict[str, int]


def canonical(value: Any) -> bytes:
    """Canonical JSON: sorted keys, no spaces, UTF-8 (stable across processes)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def delivery_hash(proc_id: str, tailers: Mapping[str, int]) -> str:
    """The delivery hash of a step: the first 64 bits of SHA-256 over the canonical
    JSON of the processor id and the tailers' indices, as 16 hex digits. The same
    for every attempt at the same step, different for any other step or processor."""
    digest = hashlib.sha256(canonical({"proc": proc_id, "tailers": dict(tailers)})).digest()
    return digest[:8].hex()


def snapshot(proc_id: str, tailers: Tailers) -> dict[str, Any]:
    return {"t": SNAPSHOT, "proc": proc_id, "tailers": tailers}


def snapshot_alts(tailer: str) -> dict[str, Any]:
    return {"t": SNAPSHOT_ALTS, "tailer": tailer}


def attempt(
    h: str, slot: int, writes: list[dict[str, Any]], index: int, nxt: Tailers
) -> dict[str, Any]:
    w = writes[slot]
    kind = ATTEMPT_ERROR if w["error"] else ATTEMPT_OUTPUT
    return {
        "t": kind,
        "hash": h,
        "slot": slot,
        "stream": w["stream"],
        "index": index,
        "writes": writes,
        "next": nxt,
    }


def attempt_nil(h: str, nxt: Tailers) -> dict[str, Any]:
    return {"t": ATTEMPT_NIL, "hash": h, "next": nxt}


def position(tailers: Tailers) -> dict[str, Any]:
    return {"t": POSITION, "tailers": tailers}


def stamped(entry: Mapping[str, Any], proc_id: str, h: str, slot: int) -> dict[str, Any]:
    """``entry`` with the metadata member that names its delivery."""
    return {**entry, META: {"hash": h, "slot": slot, "proc": proc_id}}


def is_delivery(entry: Any, proc_id: str, h: str, slot: int) -> bool:
    """Whether ``entry`` (read back from an output) is slot ``slot`` of delivery ``h``."""
    meta = entry.get(META) if isinstance(entry, dict) else None
    return (
        isinstance(meta, dict)
        and meta.get("hash") == h
        and meta.get("slot") == slot
        and meta.get("proc") == proc_id
    )
