"""Carlyle's batch tracking on its own stores: the yardstick of ``python -m bench batches``.

A faithful port of what paradoxical-io/carlyle issues (``core/db/Db.scala``,
``V1__schema.sql``, ``EstimatedBatchCount.scala``), driven with the same
workload as dynaq's phase, so the ratio compares algorithms on one machine:

**exact** (MariaDB, InnoDB with a redo-log flush per commit): items live in
``batch_item_groups`` rows of 64 items each (``max_batch_group_size``), a
``BIGINT UNSIGNED`` bitfield with one bit per pending item. Adding N items
inserts ceil(N/64) rows in one transaction. Acking a request's ids (a set)
goes group by group, sequentially, each in autocommit as Slick runs them:

1. ``UPDATE batch_item_groups SET items = CAST(items as UNSIGNED) & CAST(mask as UNSIGNED),
   updated_at = now, version = version + 1 WHERE id = group``;
2. ``isBatchEmpty``: ``SELECT is_closed FROM batches WHERE batch_id = ?`` then, when
   closed, ``SELECT EXISTS(...)`` of a non-zero group of the batch;

then one ``SELECT ... FROM batches WHERE batch_id IN (...)`` for the answer.

**estimated** (Redis): a hash per batch; a decrement is ``HINCRBY batch count -by``
followed by ``HMGET batch count userKey closed`` (Carlyle's ``decr`` then ``get``).

Each client holds one connection (Carlyle's pool is 10 by default; one per
client never makes it wait for a connection).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.common import Deadline, percentiles, rate

GROUP_SIZE = 64
FULL = (1 << GROUP_SIZE) - 1

SCHEMA = (
    """CREATE TABLE batches (
      batch_id   BIGINT AUTO_INCREMENT NOT NULL,
      is_closed  BIT DEFAULT 0,
      created_at BIGINT                NOT NULL,
      updated_at BIGINT                NOT NULL,
      user_key   NVARCHAR(255) NULL,
      PRIMARY KEY (batch_id)
    )""",
    """CREATE TABLE batch_item_groups (
      id         NVARCHAR(255)   NOT NULL,
      batch_id   BIGINT          NOT NULL,
      items      BIGINT UNSIGNED NOT NULL,
      size       BIGINT          NOT NULL,
      version    BIGINT          NOT NULL DEFAULT 0,
      created_at BIGINT          NOT NULL,
      updated_at BIGINT          NOT NULL,
      FOREIGN KEY (batch_id) REFERENCES batches (batch_id),
      PRIMARY KEY (id)
    )""",
    "CREATE INDEX `batch_items_batch_id_idx` ON batch_item_groups (batch_id)",
)
UPDATE_MASK = (
    "UPDATE batch_item_groups SET items = CAST(items as UNSIGNED) & CAST(%s as UNSIGNED),"
    " updated_at = %s, version = version + 1 WHERE id = %s"
)
IS_CLOSED = "SELECT is_closed FROM batches WHERE batch_id = %s"
NON_EMPTY_EXISTS = (
    "SELECT EXISTS(SELECT 1 FROM batch_item_groups g INNER JOIN batches b"
    " ON g.batch_id = b.batch_id WHERE b.is_closed AND g.batch_id = %s AND g.items <> 0)"
)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _truthy(bit: Any) -> bool:
    """A ``BIT(1)`` column as the driver hands it back (bytes or int)."""
    if isinstance(bit, bytes | bytearray):
        return any(bit)
    return bool(bit)


@dataclass
class PhaseResult:
    """What one baseline phase measured."""

    items: int = 0
    requests: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    completions: int = 0
    statements: int = 0

    def summary(self, prefix: str) -> dict[str, Any]:
        p = percentiles(self.latencies_ms)
        return {
            f"{prefix}_items_per_s": round(rate(self.items, self.seconds)),
            f"{prefix}_p50_ms": round(p["p50"], 2),
            f"{prefix}_p99_ms": round(p["p99"], 2),
            f"{prefix}_items_acked": self.items,
            f"{prefix}_completions": self.completions,
        }


async def _drive(
    bodies: Sequence[Any],
    concurrency: int,
    deadline: Deadline,
    make_client: Any,
    handle: Any,
    result: PhaseResult,
) -> None:
    """``concurrency`` clients take bodies off one queue until it is empty or time is up."""
    queue: asyncio.Queue[Any] = asyncio.Queue()
    for b in bodies:
        queue.put_nowait(b)

    async def client() -> None:
        conn = await make_client()
        try:
            while not queue.empty() and not deadline.expired():
                body = queue.get_nowait()
                t = time.monotonic()
                await handle(conn, body)
                result.latencies_ms.append((time.monotonic() - t) * 1000)
                result.requests += 1
        finally:
            await _close(conn)

    t0 = time.monotonic()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    result.seconds = time.monotonic() - t0


async def _close(conn: Any) -> None:
    closer = getattr(conn, "ensure_closed", None) or getattr(conn, "aclose", None)
    if closer is not None:
        await closer()


class CarlyleExact:
    """Carlyle's exact mode on MariaDB: 64-item bitfield rows, bit updates per ack."""

    def __init__(self, host: str, port: int, user: str, database: str) -> None:
        self._kw = {"host": host, "port": port, "user": user, "db": database, "autocommit": True}

    async def connect(self) -> Any:
        import asyncmy

        return await asyncmy.connect(**self._kw)

    async def create_schema(self) -> None:
        conn = await self.connect()
        try:
            async with conn.cursor() as cur:
                for stmt in SCHEMA:
                    await cur.execute(stmt)
        finally:
            await _close(conn)

    async def open_and_add(self, items: int) -> tuple[int, list[tuple[str, int]]]:
        """``createBatch`` then ``insertQueueBatchItems``: the batch id and (group, upto) blocks."""
        conn = await self.connect()
        try:
            async with conn.cursor() as cur:
                n = _now_ms()
                await cur.execute(
                    "INSERT INTO batches (is_closed, created_at, updated_at, user_key)"
                    " VALUES (0, %s, %s, %s)",
                    (n, n, "bench"),
                )
                batch_id = int(cur.lastrowid)
                sizes = [GROUP_SIZE] * (items // GROUP_SIZE)
                if items % GROUP_SIZE:
                    sizes.append(items % GROUP_SIZE)
                blocks = [(str(uuid.uuid4()), s) for s in sizes]
                rows = [(g, batch_id, (1 << s) - 1, s, 0, n, n) for g, s in blocks]
                await conn.begin()
                for i in range(0, len(rows), 5000):
                    await cur.executemany(
                        "INSERT INTO batch_item_groups"
                        " (id, batch_id, items, size, version, created_at, updated_at)"
                        " VALUES (%s, %s, %s, %s, %s, %s, %s)",
                        rows[i : i + 5000],
                    )
                await conn.commit()
            return batch_id, blocks
        finally:
            await _close(conn)

    async def close_batch(self, batch_id: int) -> bool:
        """``closeBatch``: mark closed and answer ``isBatchEmpty``, in one transaction."""
        conn = await self.connect()
        try:
            await conn.begin()
            async with conn.cursor() as cur:
                await cur.execute(
                    "UPDATE batches SET is_closed = 1, updated_at = %s WHERE batch_id = %s",
                    (_now_ms(), batch_id),
                )
                empty = await self._is_empty(cur, batch_id)
            await conn.commit()
            return empty
        finally:
            await _close(conn)

    async def _is_empty(self, cur: Any, batch_id: int) -> bool:
        await cur.execute(IS_CLOSED, (batch_id,))
        row = await cur.fetchone()
        if row is None or not _truthy(row[0]):
            return False  # an open batch is never empty
        await cur.execute(NON_EMPTY_EXISTS, (batch_id,))
        (exists,) = await cur.fetchone()
        return not exists

    async def ack(self, conn: Any, ids: Sequence[str]) -> list[int]:
        """``ackBatch`` + ``getBatchInfo``: the ids of the batches this request completed."""
        groups: dict[str, tuple[int, set[int]]] = {}
        for item in set(ids):
            batch, group, index = item.split(":")
            groups.setdefault(group, (int(batch), set()))[1].add(int(index))
        results: dict[int, bool] = {}
        async with conn.cursor() as cur:
            for group, (batch_id, indexes) in groups.items():  # SequentialFutures.serialize
                mask = FULL
                for i in indexes:
                    mask &= ~(1 << i)
                await cur.execute(UPDATE_MASK, (mask, _now_ms(), group))
                results[batch_id] = await self._is_empty(cur, batch_id)
            marks = ", ".join(["%s"] * len(results))
            await cur.execute(
                f"SELECT batch_id, is_closed, created_at, updated_at, user_key FROM batches"
                f" WHERE batch_id IN ({marks})",
                tuple(results),
            )
            rows = await cur.fetchall()
        return [int(r[0]) for r in rows if results[int(r[0])]]

    async def run(
        self, work: Sequence[str], per: int, concurrency: int, deadline: Deadline
    ) -> PhaseResult:
        """Ack ``work`` (ids ``batch:group:index``) in requests of ``per`` ids."""
        result = PhaseResult()
        bodies = [work[i : i + per] for i in range(0, len(work), per)]

        async def handle(conn: Any, body: Sequence[str]) -> None:
            result.completions += len(await self.ack(conn, body))
            result.items += len(body)

        await _drive(bodies, concurrency, deadline, self.connect, handle, result)
        return result


class CarlyleEstimated:
    """Carlyle's estimated mode on Redis: one hash per batch, ``HINCRBY`` its count."""

    def __init__(self, url: str) -> None:
        self._url = url

    async def connect(self) -> Any:
        import redis.asyncio as aioredis

        return aioredis.Redis.from_url(self._url, single_connection_client=True)

    async def open_add_close(self, items: int) -> str:
        """``create`` (HMSET), ``incr`` by ``items`` (HINCRBY), ``close`` (HSET + HMGET)."""
        r = await self.connect()
        try:
            batch = str(uuid.uuid4())
            await r.hset(batch, mapping={"count": "0", "userKey": "bench", "closed": "false"})
            await r.hincrby(batch, "count", items)
            await r.hset(batch, "closed", "true")
            await r.hmget(batch, ["count", "userKey", "closed"])
            return batch
        finally:
            await _close(r)

    async def run(
        self, batch: str, requests: int, per: int, concurrency: int, deadline: Deadline
    ) -> PhaseResult:
        """``requests`` decrements of ``per`` (``decr`` then ``get``, as Carlyle's ``decr``)."""
        result = PhaseResult()

        async def handle(r: Any, by: int) -> None:
            await r.hincrby(batch, "count", -by)
            count, _, closed = await r.hmget(batch, ["count", "userKey", "closed"])
            if int(count) <= 0 and closed == b"true":
                result.completions += 1
            result.items += by

        await _drive([per] * requests, concurrency, deadline, self.connect, handle, result)
        return result
