"""What every admin command shares: finding the node, the token, ``--json``, and
running a command so that every dynaq error becomes a message and an exit code.

Admin commands speak to a node only through :mod:`dynaq.client` (as any
other client would): ``--endpoint`` (or ``DYNAQ_ENDPOINT``; several,
comma-separated, fail over), ``--token`` (or ``DYNAQ_TOKEN``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Iterable
from typing import TypeVar

from dynaq.cli.output import USAGE, exit_code
from dynaq.client import Client
from dynaq.errors import DynaqError, Forbidden, NotFound

T = TypeVar("T")

DEFAULT_ENDPOINT = "http://127.0.0.1:8081"

Command = Callable[[argparse.Namespace, Client], int]


def common(parser: argparse.ArgumentParser) -> None:
    """The options every admin command takes (after the subcommand)."""
    parser.add_argument(
        "--endpoint",
        default=None,
        help=f"node URL(s), comma-separated (default: $DYNAQ_ENDPOINT or {DEFAULT_ENDPOINT})",
    )
    parser.add_argument("--token", default=None, help="bearer token (default: $DYNAQ_TOKEN)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--timeout", type=_seconds, default=30.0, help="seconds per request (default 30)"
    )


def number(text: str) -> float:
    """A finite number, for a float option: ``inf`` or ``nan`` is a usage error
    naming the option (argparse's), never a body the node refuses as malformed."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _seconds(text: str) -> float:
    """A ``--timeout``: a finite number of seconds above 0 (argparse names the option)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a number of seconds above 0")
    return value


def readable(names: Iterable[str], fetch: Callable[[str], T]) -> list[tuple[str, T]]:
    """``(name, fetch(name))`` for each name whose details the token may read, in order.

    A listing (``GET /v1/queues``, ``/v1/topics``) is open to any valid token, its
    items' details are not: an item the token may not read (403) is left out
    quietly, as is one deleted between the listing and its details (404), so a token
    limited to ``queue/jobs-*`` lists the ``jobs-*`` queues. Any other error is raised.
    """
    out: list[tuple[str, T]] = []
    for name in names:
        try:
            out.append((name, fetch(name)))
        except (Forbidden, NotFound):
            continue
    return out


def client_for(args: argparse.Namespace) -> Client:
    endpoint = args.endpoint or os.environ.get("DYNAQ_ENDPOINT") or DEFAULT_ENDPOINT
    token = args.token or os.environ.get("DYNAQ_TOKEN") or None
    return Client(endpoint, timeout_s=args.timeout, token=token)


def run(args: argparse.Namespace) -> int:
    """Run the admin command ``args.handler``; its exit code."""
    handler: Command = args.handler
    try:
        client = client_for(args)
    except ValueError as exc:  # the endpoint
        print(f"dynaq: {exc}", file=sys.stderr)
        return USAGE
    except DynaqError as exc:  # the TLS setup
        print(f"dynaq: {exc.code}: {exc}", file=sys.stderr)
        return exit_code(exc)
    try:
        with client:
            return handler(args, client)
    except DynaqError as exc:
        print(f"dynaq: {exc.code}: {exc}", file=sys.stderr)
        return exit_code(exc)
    except (ValueError, OSError) as exc:  # bad arguments or files, found while running
        print(f"dynaq: {exc}", file=sys.stderr)
        return USAGE
