"""Batch operations as data, exact and estimated modes (see :mod:`dynaq.client.ops`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dynaq.client.ops import JSON, Call, Op, Retry, chunked, json_bytes, single
from dynaq.client.types import BatchCompletion, BatchInfo, ItemBlock

# batches ---------------------------------------------------------------------

EXACT = "/api/v1/batch/exact"
ESTIMATED = "/api/v1/batch/estimated"


def _base(mode: str) -> str:
    if mode not in ("exact", "estimated"):
        raise ValueError(f"mode must be 'exact' or 'estimated', got {mode!r}")
    return EXACT if mode == "exact" else ESTIMATED


def open_batch(mode: str, user_key: str | None) -> Op[int]:
    body = json_bytes({} if user_key is None else {"userKey": user_key})
    call = Call("POST", _base(mode), lambda got: int(got["batchId"]), body, JSON, Retry.UNSENT)
    return single(call)


def add_items(batch_id: int, items: int) -> Op[list[ItemBlock]]:
    def read(got: Any) -> list[ItemBlock]:
        return [ItemBlock(batch_id, str(b["id"]), int(b["upto"])) for b in got["batchItemGroupIds"]]

    body = json_bytes({"batchId": batch_id, "items": items})
    return single(Call("POST", EXACT + "/items", read, body, JSON, Retry.UNSENT))


def _completions(got: Any) -> list[BatchCompletion]:
    return [BatchCompletion.from_wire(c) for c in got["batchCompletions"]]


def ack_items(item_ids: Sequence[str]) -> Op[list[BatchCompletion]]:
    calls = [
        Call(
            "POST", EXACT + "/items/ack", _completions, json_bytes({"batchItemIds": list(c)}), JSON
        )
        for c in chunked(item_ids, 10_000)
    ]
    return Op(calls, lambda results: [c for r in results for c in r])


def close_batch(batch_id: int, mode: str) -> Op[bool]:
    path = f"{EXACT}/close/{batch_id}" if mode == "exact" else f"{_base(mode)}/{batch_id}/close"
    return single(Call("POST", path, lambda got: bool(got["isComplete"])))


def describe_batch(batch_id: int, mode: str) -> Op[BatchInfo]:
    return single(Call("GET", f"{_base(mode)}/{batch_id}", BatchInfo.from_wire))


def delete_batch(batch_id: int, mode: str) -> Op[int]:
    path = f"{_base(mode)}/{batch_id}"
    return single(Call("DELETE", path, lambda got: int(got["itemsRemoved"])))


def remove_batches(mode: str, state: str, since_ms: int) -> Op[tuple[int, int]]:
    if state not in ("open", "closed"):
        raise ValueError(f"state must be 'open' or 'closed', got {state!r}")

    def read(got: Any) -> tuple[int, int]:
        return int(got["batchesRemoved"]), int(got["itemsRemoved"])

    return single(Call("DELETE", f"{_base(mode)}/{state}?since={since_ms}", read))


def incr_batch(batch_id: int, by: int) -> Op[BatchInfo]:
    path = f"{ESTIMATED}/{batch_id}/incr?by={by}"
    return single(Call("POST", path, BatchInfo.from_wire, retry=Retry.UNSENT))


def decr_batches(acks: Mapping[int, int]) -> Op[list[BatchCompletion]]:
    body = json_bytes({"acks": [{"batchId": b, "by": n} for b, n in acks.items()]})
    return single(Call("POST", ESTIMATED + "/decr", _completions, body, JSON, Retry.UNSENT))
