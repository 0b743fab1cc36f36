"""``dynaq definitions export|import``: queues (with settings), topics and subscriptions as
one JSON file, like RabbitMQ's definitions.

The file::

    {"dynaq_definitions": 1,
     "queues": [{"name": "jobs", "settings": {"visibility_timeout_s": 30, ...}}],
     "topics": [{"name": "events", "queues": ["jobs"]}]}

Import is idempotent and additive: a queue that exists gets the file's
settings, a missing one is created; topics and subscriptions are created if
missing; nothing is deleted. Messages are not part of definitions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dynaq.cli.admin import common
from dynaq.cli.output import OK, USAGE, emit_json
from dynaq.client import Client, QueueSettings
from dynaq.errors import AlreadyExists

FORMAT = 1


def add_parser(sub: Any) -> None:
    defs = sub.add_parser("definitions", help="export or import queues, topics, subscriptions")
    verbs = defs.add_subparsers(dest="verb", required=True)
    p = verbs.add_parser("export", help="write the definitions as JSON (to FILE or stdout)")
    p.add_argument("file", nargs="?", default="-", metavar="FILE")
    common(p)
    p.set_defaults(handler=export)
    p = verbs.add_parser("import", help="create or update what FILE defines (- for stdin)")
    p.add_argument("file", metavar="FILE")
    common(p)
    p.set_defaults(handler=import_)


def collect(c: Client) -> dict[str, Any]:
    """The node's definitions, as the file holds them."""
    queues = [
        {"name": name, "settings": c.describe_queue(name).settings.as_dict()}
        for name in c.list_queues()
    ]
    topics = [{"name": name, "queues": c.topic_queues(name)} for name in c.list_topics()]
    return {"dynaq_definitions": FORMAT, "queues": queues, "topics": topics}


def export(args: argparse.Namespace, c: Client) -> int:
    data = collect(c)
    text = json.dumps(data, indent=2) + "\n"
    if args.file == "-":
        sys.stdout.write(text)
        return OK
    Path(args.file).write_text(text)
    summary = {"queues": len(data["queues"]), "topics": len(data["topics"]), "file": args.file}
    if args.json:
        emit_json(summary)
    else:
        print(f"exported {summary['queues']} queues, {summary['topics']} topics to {args.file}")
    return OK


def _read(file: str) -> dict[str, Any]:
    text = sys.stdin.read() if file == "-" else Path(file).read_text()
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("dynaq_definitions") != FORMAT:
        raise ValueError(f"{file}: not a dynaq definitions file (format {FORMAT})")
    for key in ("queues", "topics"):
        if not isinstance(data.get(key, []), list):
            raise TypeError(f"{file}: {key} must be a list")
    return data


def import_(args: argparse.Namespace, c: Client) -> int:
    try:
        data = _read(args.file)
        queues = [
            (q["name"], QueueSettings.from_dict(q.get("settings", {})))
            for q in data.get("queues", [])
        ]
        topics = [(t["name"], list(t.get("queues", []))) for t in data.get("topics", [])]
    except (ValueError, KeyError, TypeError) as exc:
        print(f"dynaq: {exc}", file=sys.stderr)
        return USAGE
    created = updated = topics_created = subscriptions = 0
    total = len(queues) + len(topics)
    progress = sys.stderr.isatty() and not args.json
    for n, (name, settings) in enumerate(queues, 1):
        try:
            c.create_queue(name, settings)
            created += 1
        except AlreadyExists:
            if settings.patch():
                c.configure_queue(name, settings)
            updated += 1
        if progress:
            print(f"\r{n}/{total}", end="", file=sys.stderr)
    for n, (name, subscribed) in enumerate(topics, len(queues) + 1):
        try:
            c.create_topic(name)
            topics_created += 1
        except AlreadyExists:
            pass
        have = set(c.topic_queues(name))
        for q in subscribed:
            if q not in have:
                c.subscribe(name, q)
                subscriptions += 1
        if progress:
            print(f"\r{n}/{total}", end="", file=sys.stderr)
    if progress:
        print(file=sys.stderr)
    summary = {
        "queues_created": created,
        "queues_updated": updated,
        "topics_created": topics_created,
        "subscriptions_added": subscriptions,
    }
    if args.json:
        emit_json(summary)
    else:
        print(
            f"queues: {created} created, {updated} updated; topics: {topics_created} created; "
            f"subscriptions: {subscriptions} added"
        )
    return OK
