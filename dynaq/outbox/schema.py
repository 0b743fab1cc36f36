"""The outbox table: its DDL, the relay's queries, the ``stash`` helper, row → message.

The table (one per outbox; name configurable, optionally schema-qualified)::

    id          BIGSERIAL PRIMARY KEY       -- causal order within a key
    create_time TIMESTAMPTZ NOT NULL DEFAULT now()
    topic       TEXT NOT NULL               -- the dynaq topic to publish to
    key         TEXT NOT NULL               -- causality key: message group
    value       BYTEA NULL                  -- message body (NULL = empty body)
    headers     JSONB NOT NULL DEFAULT '{}' -- message attributes (object of strings)
    leader_id   UUID NULL                   -- the relay term that marked the row
    failed_time TIMESTAMPTZ NULL            -- set when the row was parked
    failure     TEXT NULL                   -- why it was parked (NULL = pending)

plus a partial index on ``id WHERE failure IS NULL``: the mark query walks
pending rows in id order from the head of the table and stops after its
limit, so parked rows never cost it anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol
from uuid import UUID

from dynaq.core.messages import NewMessage
from dynaq.errors import BadRecord, InvalidInput

ID_ATTRIBUTE = "outbox_id"
KEY_ATTRIBUTE = "outbox_key"
MAX_TAG_BYTES = 128
"""Longest group / dedup id the queue service accepts."""

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def quote_table(table: str) -> str:
    """``table`` or ``schema.table`` as a quoted SQL identifier; :class:`InvalidInput` if odd."""
    parts = table.split(".")
    if not 1 <= len(parts) <= 2 or not all(_IDENT.match(p) for p in parts):
        raise InvalidInput(
            f"outbox table {table!r} must be NAME or SCHEMA.NAME (letters, digits, _; ≤ 63 chars)"
        )
    return ".".join(f'"{p}"' for p in parts)


def ddl(table: str) -> list[str]:
    """The statements that create the outbox table and its mark index (idempotent)."""
    q = quote_table(table)
    index = f'"{table.split(".")[-1]}_pending_idx"'
    return [
        f"""CREATE TABLE IF NOT EXISTS {q} (
            id          BIGSERIAL PRIMARY KEY,
            create_time TIMESTAMPTZ NOT NULL DEFAULT now(),
            topic       TEXT NOT NULL,
            key         TEXT NOT NULL,
            value       BYTEA,
            headers     JSONB NOT NULL DEFAULT '{{}}'::jsonb,
            leader_id   UUID,
            failed_time TIMESTAMPTZ,
            failure     TEXT
        )""",
        f"CREATE INDEX IF NOT EXISTS {index} ON {q} (id) WHERE failure IS NULL",
    ]


class Executor(Protocol):
    """What :func:`init_db` and :func:`stash` need of an asyncpg connection (or pool)."""

    async def execute(self, query: str, *args: Any) -> str: ...

    async def fetchval(self, query: str, *args: Any) -> Any: ...


async def init_db(conn: Executor, table: str = "outbox") -> None:
    """Create the outbox table and its index if they do not exist."""
    for stmt in ddl(table):
        await conn.execute(stmt)


async def stash(
    conn: Executor,
    topic: str,
    key: str,
    value: bytes | None,
    headers: dict[str, str] | None = None,
    *,
    table: str = "outbox",
) -> int:
    """Insert one outbox row on ``conn`` (inside the caller's transaction); return its id.

    Call it in the same transaction as the business write it announces: the
    row becomes visible to the relay exactly when that transaction commits,
    and never if it rolls back. Rows of one ``key`` are published in id order
    when the writes are causally ordered (one commits before the next starts).
    """
    return int(
        await conn.fetchval(
            f"INSERT INTO {quote_table(table)} (topic, key, value, headers) "
            "VALUES ($1, $2, $3, $4::jsonb) RETURNING id",
            topic,
            key,
            value,
            json.dumps(headers or {}),
        )
    )


@dataclass(frozen=True, slots=True)
class Queries:
    """The relay's SQL for one table (mark, purge, reset, park)."""

    mark: str
    purge: str
    reset: str
    park: str

    @classmethod
    def for_table(cls, table: str) -> Queries:
        q = quote_table(table)
        return cls(
            # goharvest's mark: escrow the oldest pending rows not marked by
            # this term, atomically, returning them (in no particular order).
            mark=(
                f"UPDATE {q} SET leader_id = $1 WHERE id IN ("
                f"SELECT id FROM {q} WHERE failure IS NULL "
                "AND (leader_id IS NULL OR leader_id <> $1) ORDER BY id LIMIT $2) "
                "RETURNING id, topic, key, value, headers::text, leader_id"
            ),
            purge=f"DELETE FROM {q} WHERE id = ANY($1::bigint[])",
            # Only undo our own mark: a later term that re-marked the row owns it now.
            reset=(
                f"UPDATE {q} SET leader_id = NULL WHERE id = ANY($1::bigint[]) AND leader_id = $2"
            ),
            park=f"UPDATE {q} SET failure = $2, failed_time = now() WHERE id = $1",
        )


class OutboxRecord(NamedTuple):
    """One marked outbox row.

    A named tuple rather than a frozen dataclass: the relay makes one per
    marked row, and a tuple is built in one step from the driver's record.
    """

    id: int
    topic: str
    key: str
    value: bytes | None
    headers: str
    """The JSONB headers as text (decoded only when publishing)."""
    leader_id: UUID


def record_from_row(row: Any) -> OutboxRecord:
    """An :class:`OutboxRecord` from an asyncpg row of the mark query."""
    return OutboxRecord._make(row)


def draw_message_ids(n: int) -> list[str]:
    """``n`` random (version 4) UUIDs as strings: messages' ids in envelopes.

    One read of the OS's randomness for all of them, several times cheaper
    than ``str(uuid4())`` each (which the topic service would draw otherwise).
    """
    raw = bytearray(os.urandom(16 * n))
    out: list[str] = []
    for i in range(0, 16 * n, 16):
        raw[i + 6] = (raw[i + 6] & 0x0F) | 0x40  # version 4
        raw[i + 8] = (raw[i + 8] & 0x3F) | 0x80  # RFC 4122 variant
        h = raw[i : i + 16].hex()
        out.append(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
    return out


def _tag(prefix: str, text: str) -> str:
    """``text`` if it fits a group/dedup id, else a stable digest of it."""
    # A character is at most 4 UTF-8 bytes: short text fits without encoding it.
    if len(text) <= MAX_TAG_BYTES // 4 or len(text.encode()) <= MAX_TAG_BYTES:
        return text
    return prefix + hashlib.blake2b(text.encode(), digest_size=32).hexdigest()


def to_message(rec: OutboxRecord, table: str, max_message_bytes: int | None) -> NewMessage:
    """The message a row publishes: key → group, table:id → dedup id, headers → attributes.

    The attributes also carry ``outbox_id`` and ``outbox_key`` so consumers can
    deduplicate beyond the queue's dedup window. Raises :class:`~dynaq.errors.BadRecord`
    for rows that can never be published (bad headers, oversize body).
    """
    body = rec.value or b""
    if max_message_bytes is not None and len(body) > max_message_bytes:
        raise BadRecord(f"value is {len(body)} bytes; the limit is {max_message_bytes}")
    attrs: dict[str, str] = {}
    if rec.headers and rec.headers != "{}":  # the column's default: skip the parse
        try:
            headers = json.loads(rec.headers)
        except ValueError as exc:
            raise BadRecord(f"headers are not JSON: {exc}") from exc
        if not isinstance(headers, dict):
            raise BadRecord("headers must be a JSON object")
        attrs = {k: v if isinstance(v, str) else json.dumps(v) for k, v in headers.items()}
    attrs[ID_ATTRIBUTE] = str(rec.id)
    attrs[KEY_ATTRIBUTE] = rec.key
    return NewMessage(
        body=body,
        attributes=attrs,
        group=_tag("h:", rec.key),
        dedup_id=_tag("h:", f"{table}:{rec.id}"),
    )


Prepared = tuple[NewMessage, str]
"""A row's message and its message id (the envelope's MessageId)."""


def prepare_rows(
    recs: list[OutboxRecord], table: str, max_bytes: int | None
) -> list[tuple[OutboxRecord, Prepared | BadRecord]]:
    """Each row's message and message id, or why it can never be published."""
    out: list[tuple[OutboxRecord, Prepared | BadRecord]] = []
    for rec, mid in zip(recs, draw_message_ids(len(recs)), strict=True):
        try:
            out.append((rec, (to_message(rec, table, max_bytes), mid)))
        except BadRecord as exc:
            out.append((rec, exc))
    return out
