"""Processor status operations as data (see :mod:`dynaq.client.ops`): what workers
report (``PUT /v2/processors/{name}``) and what operators read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dynaq.client.ops import JSON, Call, Op, Retry, json_bytes, quoted, single


def _object(got: Any) -> dict[str, Any]:
    return dict(got)


def report(name: str, body: Mapping[str, Any]) -> Op[dict[str, Any]]:
    """Store ``body`` as processor ``name``'s latest report (idempotent: a resend
    stores the same report again)."""
    return single(
        Call(
            "PUT",
            f"/v2/processors/{quoted(name)}",
            _object,
            body=json_bytes(body),
            content_type=JSON,
            retry=Retry.ALWAYS,
        )
    )


def list_processors() -> Op[list[dict[str, Any]]]:
    def read(got: Any) -> list[dict[str, Any]]:
        return [dict(p) for p in got["processors"]]

    return single(Call("GET", "/v2/processors", read))


def describe(name: str) -> Op[dict[str, Any]]:
    return single(Call("GET", f"/v2/processors/{quoted(name)}", _object))


def forget(name: str) -> Op[None]:
    return single(Call("DELETE", f"/v2/processors/{quoted(name)}", lambda _: None))
