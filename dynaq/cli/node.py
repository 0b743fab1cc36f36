"""The node-running commands: ``server``, ``migrate``, ``version``, ``outbox init-db``.

With :mod:`dynaq.node`, the only place that reads the node's environment:
config is loaded from ``--config`` with ``DYNAQ_*`` overrides.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from dynaq import __version__
from dynaq.config import Config, load_config
from dynaq.errors import DynaqError
from dynaq.logs import setup_logging
from dynaq.outbox import cli as outbox_cli


def add_parsers(sub: Any) -> None:
    """Add the node commands to the ``dynaq`` parser's subcommands."""
    server = sub.add_parser("server", help="run a node in the foreground")
    server.add_argument("--config", "-c", help="TOML config file (DYNAQ_* env vars override it)")
    mig = sub.add_parser("migrate", help="create or upgrade the store, then exit")
    mig.add_argument("--config", "-c", help="TOML config file")
    sub.add_parser("version", help="print the version")
    outbox_cli.add_parser(sub)


def _config(path: str | None) -> Config:
    try:
        return load_config(path)
    except (OSError, DynaqError, ValueError) as exc:
        print(f"dynaq: bad configuration: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


async def _migrate(config: Config) -> None:
    from dynaq.node import build_store, migrate

    store = build_store(config)
    await store.open()
    try:
        changed = await migrate(store)
    finally:
        await store.close()
    print("store initialised" if changed else "store is up to date")


def run(args: argparse.Namespace) -> None:
    """Run a parsed node command (exits with its status)."""
    if args.command == "version":
        print(f"dynaq {__version__}")
        return
    if args.command == "outbox":
        raise SystemExit(outbox_cli.run(args))
    config = _config(args.config)
    setup_logging(config.log.level, config.log.format, config.node.name)
    try:
        if args.command == "migrate":
            asyncio.run(_migrate(config))
        elif args.command == "server":
            from dynaq.node import run_node

            # A test hook, read here where the environment is: SIGKILL at a transaction step.
            asyncio.run(run_node(config, os.environ.get("DYNAQ_TESTING_CRASH_AT") or None))
    except DynaqError as exc:
        print(f"dynaq: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        pass
