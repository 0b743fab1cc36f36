"""``dynaq stream list|declare|show|append|cat|tail|delete``.

Streams are node-local: point ``--endpoint`` at the node that holds the stream.
``cat`` prints a range and ends; ``tail`` prints the last entries and then each
new one as it becomes durable, until ``--count`` entries, ``--idle-exit``
seconds without one, the stream's deletion, or Ctrl-C (all exit 0). With
``--json``, ``cat`` prints one JSON document and ``tail`` one JSON object per
line (so a script can read it as it comes). Exit codes: :mod:`dynaq.cli.output`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from dynaq.cli.admin import common, number
from dynaq.cli.output import OK, emit_json, pairs, table
from dynaq.client import Client, StreamEntry, StreamInfo

PAGE = 1000
"""Entries per request when ``cat`` walks a range."""


def add_parser(sub: Any) -> None:
    stream = sub.add_parser("stream", help="streams: list, declare, show, append, cat, tail")
    verbs = stream.add_subparsers(dest="verb", required=True)

    p = verbs.add_parser("list", help="every stream of the node with its size")
    p.add_argument(
        "--hidden", action="store_true", help="also processors' backing streams (_cues.*)"
    )
    common(p)
    p.set_defaults(handler=list_streams)

    p = verbs.add_parser("declare", help="create a stream, or extend its schema")
    p.add_argument("name")
    p.add_argument(
        "--schema", required=True, metavar="FILE", help="JSON Schema of an entry (- for stdin)"
    )
    p.add_argument("--order-key", default=None, help="the integer entry field that orders it")
    common(p)
    p.set_defaults(handler=declare)

    for name, handler, text in (
        ("show", show, "a stream's schema and figures"),
        ("delete", delete, "delete a stream and its entries"),
    ):
        p = verbs.add_parser(name, help=text)
        p.add_argument("name")
        common(p)
        p.set_defaults(handler=handler)

    p = verbs.add_parser("append", help="append entries (JSON objects, or - for JSON lines)")
    p.add_argument("name")
    p.add_argument("entries", nargs="+", metavar="ENTRY")
    p.add_argument(
        "--publisher-token", type=int, default=None, help="the publisher lease's fencing token"
    )
    common(p)
    p.set_defaults(handler=append)

    p = verbs.add_parser("cat", help="print a range of entries")
    p.add_argument("name")
    _start_options(p)
    p.add_argument("--count", type=int, default=None, help="at most this many (default: all)")
    p.add_argument("--until", type=int, default=None, help="stop after this order key")
    common(p)
    p.set_defaults(handler=cat)

    p = verbs.add_parser("tail", help="the last entries, then new ones live")
    p.add_argument("name")
    p.add_argument("-n", "--lines", type=int, default=10, help="start N entries back (default 10)")
    _start_options(p)
    p.add_argument("--count", type=int, default=None, help="stop after this many entries")
    p.add_argument(
        "--idle-exit", type=number, default=None, metavar="S", help="stop after S s with no entry"
    )
    common(p)
    p.set_defaults(handler=tail)


def _start_options(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--from", type=int, dest="start", help="start at this index")
    where.add_argument("--since", type=int, default=None, help="start at this order key")


def list_streams(args: argparse.Namespace, c: Client) -> int:
    streams = c.list_streams(hidden=args.hidden)
    if args.json:
        emit_json({"streams": [_info(s) for s in streams]})
    else:
        rows = [(s.name, s.size, s.order_key, s.segments, s.signature) for s in streams]
        table(rows, ["NAME", "SIZE", "ORDER_KEY", "SEGMENTS", "SIGNATURE"])
    return OK


def _info(s: StreamInfo) -> dict[str, Any]:
    out = asdict(s)
    if out.get("schema") is None:
        out.pop("schema", None)
    return out


def declare(args: argparse.Namespace, c: Client) -> int:
    text = sys.stdin.read() if args.schema == "-" else _read_file(args.schema)
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"--schema {args.schema}: not JSON ({exc})") from exc
    if not isinstance(schema, dict):
        raise ValueError(f"--schema {args.schema}: a JSON Schema is an object")  # noqa: TRY004 (bad usage: exit 2)
    made = c.declare_stream(args.name, schema, args.order_key)
    if args.json:
        emit_json(asdict(made))
    else:
        what = "created" if made.created else "schema extended" if made.extended else "unchanged"
        print(f"stream {made.name} {what} (signature {made.signature})")
    return OK


def _read_file(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def show(args: argparse.Namespace, c: Client) -> int:
    info = c.describe_stream(args.name)
    if args.json:
        emit_json(_info(info))
    else:
        figures = _info(info)
        schema = figures.pop("schema", None)
        pairs(figures)
        print("schema")
        print(json.dumps(schema, indent=2))
    return OK


def delete(args: argparse.Namespace, c: Client) -> int:
    c.delete_stream(args.name)
    if args.json:
        emit_json({"deleted": args.name})
    else:
        print(f"stream {args.name} deleted")
    return OK


def _entries(args: Iterable[str]) -> list[Any]:
    out = []
    for arg in args:
        lines = sys.stdin.read().splitlines() if arg == "-" else [arg]
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except ValueError as exc:
                where = f"stdin line {n}" if arg == "-" else f"entry {line[:40]!r}"
                raise ValueError(f"{where} is not JSON ({exc})") from exc
    if not out:
        raise ValueError("no entries to append")
    return out


def append(args: argparse.Namespace, c: Client) -> int:
    done = c.append(args.name, _entries(args.entries), token=args.publisher_token)
    if args.json:
        emit_json(asdict(done))
    else:
        last = done.first_index + done.count - 1
        print(f"appended {done.count} entries to {args.name}: {done.first_index}..{last}")
    return OK


def _line(e: StreamEntry) -> str:
    return f"{e.index}\t{e.order}\t{json.dumps(e.entry, separators=(',', ':'))}"


def cat(args: argparse.Namespace, c: Client) -> int:
    if args.count is not None and args.count < 1:
        raise ValueError("--count must be ≥ 1")
    got: list[StreamEntry] = []
    start, since = args.start, args.since
    while args.count is None or len(got) < args.count:
        want = PAGE if args.count is None else min(PAGE, args.count - len(got))
        page = c.read_range(args.name, start, want, since=since, until=args.until)
        got.extend(page)
        if len(page) < want:
            break
        start, since = page[-1].index + 1, None  # on from where this page ended
    if args.json:
        emit_json({"entries": [asdict(e) for e in got]})
    else:
        table(
            [(e.index, e.order, json.dumps(e.entry, separators=(",", ":"))) for e in got],
            ["INDEX", "ORDER", "ENTRY"],
        )
    return OK


def tail(args: argparse.Namespace, c: Client) -> int:
    if args.lines < 0:
        raise ValueError("-n must be ≥ 0")
    start, since = args.start, args.since
    back = None if start is not None or since is not None else args.lines
    entries = c.follow(
        args.name,
        start=start,
        tail=back,
        since=since,
        count=args.count,
        idle_timeout_s=args.idle_exit,
    )
    try:
        for e in entries:
            print(json.dumps(asdict(e)) if args.json else _line(e), flush=True)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a live tail normally ends
    except BrokenPipeError:
        # The reader (``| head``) went away: done, and nothing more to flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        entries.close()
    return OK
