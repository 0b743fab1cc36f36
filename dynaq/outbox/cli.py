"""``dynaq outbox init-db --dsn DSN [--table T]``: create the outbox table and its index."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from dynaq.errors import DynaqError


def add_parser(subparsers: Any) -> None:
    """Add the ``outbox`` command (with its ``init-db`` subcommand) to the ``dynaq`` parser."""
    outbox = subparsers.add_parser("outbox", help="transactional-outbox relay tools")
    sub = outbox.add_subparsers(dest="outbox_command", required=True)
    init = sub.add_parser("init-db", help="create the outbox table and its index (idempotent)")
    init.add_argument(
        "--dsn",
        default=os.environ.get("DYNAQ_OUTBOX_DSN", ""),
        help="PostgreSQL DSN, e.g. postgresql://user@host:5432/db (default: $DYNAQ_OUTBOX_DSN)",
    )
    init.add_argument(
        "--table",
        default=os.environ.get("DYNAQ_OUTBOX_TABLE", "outbox"),
        help="table name, NAME or SCHEMA.NAME (default: $DYNAQ_OUTBOX_TABLE or 'outbox')",
    )


async def _init_db(dsn: str, table: str) -> None:
    try:
        import asyncpg
    except ImportError:
        raise DynaqError("the outbox needs asyncpg: pip install 'dynaq[outbox]'") from None
    from dynaq.outbox.schema import init_db

    conn = await asyncpg.connect(dsn, timeout=30)
    try:
        await init_db(conn, table)
    finally:
        await conn.close()


def run(args: argparse.Namespace) -> int:
    """Run the parsed ``outbox`` command; return the exit code."""
    if args.outbox_command == "init-db":
        if not args.dsn:
            print("dynaq outbox init-db: --dsn (or DYNAQ_OUTBOX_DSN) is required", file=sys.stderr)
            return 2
        try:
            asyncio.run(_init_db(args.dsn, args.table))
        except (DynaqError, OSError) as exc:
            print(f"dynaq outbox init-db: {exc}", file=sys.stderr)
            return 1
        except Exception as exc:  # noqa: BLE001 - asyncpg's errors (bad DSN, auth, SQL) end here
            print(f"dynaq outbox init-db: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        print(f"outbox table {args.table!r} is ready")
        return 0
    return 2
