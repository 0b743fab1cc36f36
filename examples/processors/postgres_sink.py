"""A sink whose side effect happens exactly once: PostgreSQL, with the delivery hash.

Processors give sinks at-least-once delivery and a *delivery hash* that is the
same on every retry of a step (``sha256`` of the processor id and its input
positions). The sink records the hash in the same transaction as its effect::

    INSERT INTO cues_deliveries (delivery_hash) VALUES ($1)
        ON CONFLICT (delivery_hash) DO NOTHING

and does the effect only if that inserted a row. A retry (after a crash between
the commit and the processor's own record of the delivery) finds the hash and
does nothing, so the effect — here a running total, which is not idempotent by
itself — happens once per input entry.

Run it (the DSN names a database the worker may create tables in)::

    DYNAQ_EXAMPLE_PG_DSN=postgresql://user@127.0.0.1/db \\
        dynaq worker examples.processors.postgres_sink:graph --endpoint http://127.0.0.1:8081

then append ``{"order": "o-1", "amount": 12}`` entries to stream ``pg-orders``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

import asyncpg

from dynaq.processors import Graph

SCHEMA = """
CREATE TABLE IF NOT EXISTS cues_deliveries (
    delivery_hash text PRIMARY KEY,
    delivered_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS order_totals (
    id int PRIMARY KEY,
    orders int NOT NULL,
    amount bigint NOT NULL
);
INSERT INTO order_totals VALUES (1, 0, 0) ON CONFLICT (id) DO NOTHING;
"""


class Store:
    """One connection pool per worker process, made on first use."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._pool: asyncpg.Pool | None = None
        self._lock = asyncio.Lock()

    async def pool(self) -> asyncpg.Pool:
        async with self._lock:
            if self._pool is None:
                self._pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=2)
                async with self._pool.acquire() as conn:
                    await conn.execute(SCHEMA)
            return self._pool

    async def record(self, entries: Mapping[str, Any], delivery_hash: str) -> None:
        """The sink function: the effect and the hash, one transaction."""
        order = entries["pg-orders"]
        async with (await self.pool()).acquire() as conn, conn.transaction():
            first = await conn.execute(
                "INSERT INTO cues_deliveries (delivery_hash) VALUES ($1) "
                "ON CONFLICT (delivery_hash) DO NOTHING",
                delivery_hash,
            )
            if first != "INSERT 0 1":
                return  # a retry of a delivery already committed: nothing to do
            await conn.execute(
                "UPDATE order_totals SET orders = orders + 1, amount = amount + $1 WHERE id = 1",
                int(order["amount"]),
            )


def graph() -> Graph:
    """The graph (a function: the DSN is read when the worker starts, not at import)."""
    store = Store(os.environ["DYNAQ_EXAMPLE_PG_DSN"])
    g = Graph("pg")
    g.sink("totals", store.record, ["pg-orders"])
    return g
