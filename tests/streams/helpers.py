"""Small clients for the stream routes, used by the stream tests against real nodes."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

TRADES: dict[str, Any] = {
    "type": "object",
    "properties": {"ts": {"type": "integer"}, "price": {"type": "number"}},
    "required": ["ts", "price"],
}
"""A plain entry type with an order key ``ts``."""


def polymorphic(*names: str) -> dict[str, Any]:
    """A ``oneOf`` type with one variant per name, each requiring ``ts``."""
    variants = [
        {
            "type": "object",
            "properties": {"type": {"const": n}, "ts": {"type": "integer"}, n: {"type": "string"}},
            "required": ["type", "ts", n],
        }
        for n in names
    ]
    return {"oneOf": variants}


async def declare(
    http: aiohttp.ClientSession,
    url: str,
    name: str,
    schema: dict[str, Any],
    order_key: str | None = "ts",
) -> tuple[int, Any]:
    async with http.put(
        f"{url}/v2/streams/{name}", json={"schema": schema, "order_key": order_key}
    ) as r:
        return r.status, await r.json()


async def append(
    http: aiohttp.ClientSession,
    url: str,
    name: str,
    entries: list[Any],
    token: int | None = None,
) -> tuple[int, Any]:
    headers = {} if token is None else {"X-Publisher-Token": str(token)}
    async with http.post(
        f"{url}/v2/streams/{name}/entries", json={"entries": entries}, headers=headers
    ) as r:
        return r.status, await r.json()


async def read(
    http: aiohttp.ClientSession, url: str, name: str, **params: str | int
) -> tuple[int, bytes, dict[str, str]]:
    """A bounded listen (callers pass ``nowait`` or a stop condition)."""
    query = {k: str(v) for k, v in params.items()}
    async with http.get(f"{url}/v2/streams/{name}", params=query) as r:
        return r.status, await r.read(), dict(r.headers)


def jsonl(body: bytes) -> list[tuple[int, int, Any]]:
    """Parse Sherlock's line format into (index, order, entry)."""
    out = []
    for line in body.decode().splitlines():
        head, _, entry = line.partition("\t")
        meta = json.loads(head)
        out.append((meta["index"], meta["order"], json.loads(entry)))
    return out
