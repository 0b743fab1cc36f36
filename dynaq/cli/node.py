"""The node-running commands: ``server``, ``migrate``, ``version``, ``outbox init-db``.

With :mod:`dynaq.node`, the only place that reads the node's environment:
config is loaded from ``--config`` (or the file ``DYNAQ_CONFIG`` names) with
``DYNAQ_*`` overrides.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from dynaq import __version__
from dynaq.config import Config, check_ranges, load_config
from dynaq.errors import DynaqError
from dynaq.logs import name_worker, setup_logging
from dynaq.outbox import cli as outbox_cli


def add_parsers(sub: Any) -> None:
    """Add the node commands to the ``dynaq`` parser's subcommands."""
    server = sub.add_parser("server", help="run a node in the foreground")
    server.add_argument(
        "--config",
        "-c",
        help="TOML config file (default: $DYNAQ_CONFIG; DYNAQ_* env vars override it)",
    )
    server.add_argument(
        "--workers",
        type=int,
        help="worker processes serving this node through one port (overrides http.workers; "
        "0 = one per core)",
    )
    mig = sub.add_parser("migrate", help="create or upgrade the store, then exit")
    mig.add_argument("--config", "-c", help="TOML config file (default: $DYNAQ_CONFIG)")
    sub.add_parser("version", help="print the version")
    outbox_cli.add_parser(sub)


def _config(path: str | None, workers: int | None = None) -> Config:
    """The node's configuration (``--config``, else the file ``DYNAQ_CONFIG`` names;
    ``--workers`` applied), checked as far as it can be before anything starts: what
    is wrong with it is exit 2, ``bad configuration``, whichever part (file,
    ``DYNAQ_*``, flag) holds it."""
    from dynaq.node.builders import check_config

    try:
        config = load_config(path)
        if workers is not None:
            config = dataclasses.replace(
                config, http=dataclasses.replace(config.http, workers=workers)
            )
            check_ranges(config)
        check_config(config)
        return config
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


def _serve(config: Config, args: argparse.Namespace) -> None:
    """Run the node: itself, one worker of it (started by its supervisor), or the
    supervisor of its workers (``http.workers`` > 1)."""
    from dynaq.node import run_node
    from dynaq.node.claims import DataDirLock
    from dynaq.node.supervisor import die_with_parent, run_supervisor
    from dynaq.node.workers import check_workers, role_from_env, worker_count, worker_name

    # A test hook, read here where the environment is: SIGKILL at a transaction step.
    crash_at = os.environ.get("DYNAQ_TESTING_CRASH_AT") or None
    role = role_from_env()
    if role is not None:
        die_with_parent(role.parent)
        name_worker(worker_name(config.node.name, role.index))
        run_loop(run_node(config, worker=role, crash_at=crash_at), config.http.event_loop)
        return
    # One process owns the data directory: the node, or the supervisor of its
    # workers (they open the store under its lock). Workers return above.
    with DataDirLock(config.data.dir):
        if worker_count(config) == 1:
            run_loop(run_node(config, crash_at=crash_at), config.http.event_loop)
            return
        check_workers(config)
        argv = ["server"] + ([] if args.config is None else ["--config", args.config])
        asyncio.run(run_supervisor(config, argv))


# How long a thread may hold the GIL while another waits for it (CPython's
# default: 5 ms). The LMDB writer thread gives the GIL up around every LMDB call
# (each delete, get, commit) and must take it back after: behind a busy event
# loop, each take could wait the whole interval, so a commit of 400 deletes took
# 6-8 ms instead of 1. At 0.5 ms the loop yields it sooner; the cost is a few
# more switches per second, each a few microseconds.
_SWITCH_INTERVAL_S = 0.0005

# The cyclic garbage collector's first-generation threshold (CPython's default:
# 700 allocations). A node allocates per message (requests, records, futures)
# and almost nothing it allocates forms cycles, yet at the default every 700
# allocations paid a young-generation pass: 11 % of the node's CPU over an
# enqueue and drain of 200k messages, 1 % at 20,000.
_GC_THRESHOLDS = (20_000, 10, 10)


def tune_process() -> None:
    """The interpreter settings a node process runs under: the GIL switch interval and
    the garbage collector's thresholds above, and what the imports built frozen out of
    every full collection's way. In-process benchmarks call it too, so they measure
    a node as it runs."""
    sys.setswitchinterval(_SWITCH_INTERVAL_S)
    gc.set_threshold(*_GC_THRESHOLDS)
    # What the imports built lives as long as the process: out of every full
    # collection's way from here on (a full pass no longer walks it).
    gc.collect()
    gc.freeze()


def loop_factory(event_loop: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop constructor ``http.event_loop`` names (None: the standard library's;
    also when uvloop is named but not installed)."""
    if event_loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            print("dynaq: uvloop is not installed; using asyncio's event loop", file=sys.stderr)
        else:
            return uvloop.new_event_loop
    return None


def run_loop(main: Coroutine[Any, Any, None], event_loop: str) -> None:
    """Run ``main`` to completion on a new event loop of the kind ``http.event_loop``
    names (uvloop, where it is installed; else the standard library's)."""
    tune_process()
    factory = loop_factory(event_loop)
    if factory is not None:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(main)
        return
    asyncio.run(main)


def run(args: argparse.Namespace) -> None:
    """Run a parsed node command (exits with its status)."""
    if args.command == "version":
        print(f"dynaq {__version__}")
        return
    if args.command == "outbox":
        raise SystemExit(outbox_cli.run(args))
    config = _config(args.config, getattr(args, "workers", None))
    setup_logging(config.log.level, config.log.format, config.node.name)
    try:
        if args.command == "migrate":
            asyncio.run(_migrate(config))
        elif args.command == "server":
            _serve(config, args)
            exit_without_finalizing(0)
    except DynaqError as exc:
        print(f"dynaq: {exc}", file=sys.stderr)
        if args.command == "server":
            exit_without_finalizing(1)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        pass


def exit_without_finalizing(status: int) -> None:
    """End a node's process once it stopped, without finalizing the interpreter.

    The node has closed everything it opened by now (store, sockets, gossip,
    writer process, data directory lock). What finalization would add is a
    race: kinship's Rust thread may still take the GIL for a late callback
    (a log record waking its log drain), and once finalization has cleared the
    interpreter state that call crashes the process (SIGSEGV in
    ``PyThreadState_New``, seen twice on our machines), turning a clean stop's
    exit 0 into a signal. Logs and standard streams are flushed first.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)
