"""``dynaq queue purge|redrive|dlq-sources``: background queue tasks, with progress.

``purge`` and ``redrive`` start a task on the node and, with ``--wait`` (the
default on a terminal), follow it until it ends, printing its progress; the
exit code is 0 when the task finished ``done``, 1 when it ``failed`` or was
``interrupted`` (its node stopped), and 1 too when ``--timeout-wait`` ran out.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from typing import Any

from dynaq.cli.admin import common, number
from dynaq.cli.output import OK, REFUSED, emit_json
from dynaq.client import Client, TaskInfo
from dynaq.errors import DynaqError, QueueNotFound

_POLL_S = 0.5


def add_verbs(verbs: Any) -> None:
    p = verbs.add_parser("purge", help="delete every message of a queue (background task)")
    p.add_argument("name")
    _wait_options(p)
    common(p)
    p.set_defaults(handler=purge)

    p = verbs.add_parser("redrive", help="move a dead-letter queue's messages back")
    p.add_argument("name", help="the dead-letter queue")
    p.add_argument("--to", default=None, help="another queue (default: where each came from)")
    p.add_argument("--rate", type=int, default=None, help="messages a second (default 500)")
    _wait_options(p)
    common(p)
    p.set_defaults(handler=redrive)

    p = verbs.add_parser("cancel-task", help="stop a running redrive (what it moved stays)")
    p.add_argument("name", help="the dead-letter queue the redrive empties")
    p.add_argument("task", help="the task id (from redrive --no-wait, or --json)")
    common(p)
    p.set_defaults(handler=cancel_task)

    p = verbs.add_parser("dlq-sources", help="the queues that use this dead-letter queue")
    p.add_argument("name")
    common(p)
    p.set_defaults(handler=dlq_sources)


def _wait_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-wait", action="store_true", help="start the task and return")
    p.add_argument(
        "--timeout-wait", type=number, default=600.0, help="longest wait in seconds (default 600)"
    )


def purge(args: argparse.Namespace, c: Client) -> int:
    return _follow(args, c, c.purge_queue(args.name))


def redrive(args: argparse.Namespace, c: Client) -> int:
    try:
        started = c.redrive(args.name, args.to, args.rate)
    except QueueNotFound as exc:
        raise _missing_queue(c, args, exc) from None
    return _follow(args, c, started)


def _missing_queue(c: Client, args: argparse.Namespace, exc: QueueNotFound) -> QueueNotFound:
    """The node's 404 for a redrive, naming the queue that is missing: the node's
    answer does not say whether the dead-letter queue or ``--to`` is the one."""
    if args.to is not None:
        try:
            c.describe_queue(args.name)  # admin on it (the redrive's grant) reads it
        except QueueNotFound:
            pass
        except DynaqError:
            return exc  # cannot tell: the node's own words
        else:
            return QueueNotFound(f"the --to queue {args.to!r} does not exist ({exc})")
    return QueueNotFound(f"the dead-letter queue {args.name!r} does not exist ({exc})")


def cancel_task(args: argparse.Namespace, c: Client) -> int:
    t = c.cancel_task(args.name, args.task)
    if args.json:
        emit_json(asdict(t))
    else:
        print(f"{t.kind} of {t.queue} {t.state}: {t.moved} moved (task {t.id})")
    return OK


def _follow(args: argparse.Namespace, c: Client, t: TaskInfo) -> int:
    if not args.no_wait:
        deadline = time.monotonic() + args.timeout_wait
        while not t.finished and time.monotonic() < deadline:
            if not args.json:
                _progress(t)
            time.sleep(_POLL_S)
            t = c.task(t.id)
        if not args.json and sys.stderr.isatty():
            print(file=sys.stderr)
    if args.json:
        emit_json(asdict(t))
    else:
        extra = f", {t.skipped} skipped" if t.skipped else ""
        error = f": {t.error}" if t.error else ""
        print(f"{t.kind} of {t.queue} {t.state}: {t.moved} moved{extra}{error} (task {t.id})")
    return OK if t.state in ("done", "running") and (args.no_wait or t.state == "done") else REFUSED


def _progress(t: TaskInfo) -> None:
    """One progress line on stderr (rewritten in place on a terminal)."""
    line = f"{t.kind} of {t.queue}: {t.moved} moved, {t.skipped} skipped"
    if sys.stderr.isatty():
        print("\r" + line, end="", file=sys.stderr, flush=True)


def dlq_sources(args: argparse.Namespace, c: Client) -> int:
    queues = c.dead_letter_sources(args.name)
    if args.json:
        emit_json({"queues": queues})
    else:
        for q in queues:
            print(q)
    return OK
