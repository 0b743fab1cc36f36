"""``dynaq definitions export|import``: queues (with settings), topics and subscriptions as
one JSON file, like RabbitMQ's definitions.

The file::

    {"dynaq_definitions": 1,
     "queues": [{"name": "jobs", "settings": {"visibility_timeout_s": 30, "delay_s": 5,
                 "redrive_policy": {"dead_letter_queue": "jobs-dlq", "max_receive_count": 3},
                 "fifo": false, "tags": {}, ...}}],
     "topics": [{"name": "events", "queues": ["jobs"],
                 "subscriptions": {"jobs": {"filter_policy": {"kind": ["order"]},
                                            "filter_scope": "attributes",
                                            "raw_delivery": true}}}]}

Every setting a queue has is exported (``GET /v2/queues/:queue``), and every
subscription's options; a file without ``subscriptions`` (format 1 as first
written) subscribes with the defaults.

Import is idempotent and additive: a queue that exists gets the file's
settings, a missing one is created; topics are created if missing and each
subscription gets the file's options; nothing is deleted. The whole file is
checked first (names, setting names and types, what topics and redrive policies
refer to: in the file or on the node), so a bad file changes nothing (exit 2).
Queues are created before any redrive policy is set, so a dead-letter queue may
come later in the file. Messages are not part of definitions.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dynaq.cli.admin import common
from dynaq.cli.output import OK, USAGE, emit_json
from dynaq.client import Client, QueueSettings
from dynaq.client.ops_topics import DEFAULT_SUBSCRIPTION
from dynaq.errors import AlreadyExists
from dynaq.services.queue_records import NAME_PATTERN

FORMAT = 1
_OPTIONS = {"filter_policy", "filter_scope", "raw_delivery"}


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
    topics = []
    for name in c.list_topics():
        subs = c.topic_subscriptions(name)
        topics.append({"name": name, "queues": list(subs), "subscriptions": subs})
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


Topic = tuple[str, dict[str, dict[str, Any]]]


def _read(file: str) -> dict[str, Any]:
    """The file's definitions, its framing checked (an error does not name the file:
    the caller does)."""
    text = sys.stdin.read() if file == "-" else Path(file).read_text()
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("dynaq_definitions") != FORMAT:
        raise ValueError(f"not a dynaq definitions file (format {FORMAT})")
    for key in ("queues", "topics"):
        if not isinstance(data.get(key, []), list):
            raise TypeError(f"{key} must be a list")
    return data


def _name(kind: str, entry: Any) -> str:
    if not isinstance(entry, Mapping):
        raise TypeError(f"a {kind} entry must be an object, got {entry!r:.60}")
    name = entry.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"invalid {kind} name {name!r:.90}")
    return name


def _queue(entry: Any) -> tuple[str, QueueSettings]:
    name = _name("queue", entry)
    settings = entry.get("settings", {})
    if not isinstance(settings, Mapping):
        raise TypeError(f"queue {name}: settings must be an object")
    return name, QueueSettings.from_dict(settings)


def _topic(entry: Any) -> Topic:
    name = _name("topic", entry)
    queues = entry.get("queues", [])
    subs = entry.get("subscriptions", {})
    if not isinstance(queues, list) or not all(isinstance(q, str) for q in queues):
        raise TypeError(f"topic {name}: queues must be a list of names")
    if not isinstance(subs, Mapping):
        raise TypeError(f"topic {name}: subscriptions must be an object")
    out: dict[str, dict[str, Any]] = {q: {} for q in queues}
    for q, options in subs.items():
        if not isinstance(options, Mapping) or set(options) - _OPTIONS:
            raise ValueError(f"topic {name}: the options of {q!r} take only {sorted(_OPTIONS)}")
        policy = options.get("filter_policy")
        if policy is not None and not isinstance(policy, Mapping):
            raise TypeError(f"topic {name}: {q}'s filter_policy must be an object or null")
        if options.get("filter_scope", "attributes") not in ("attributes", "body"):
            raise ValueError(f"topic {name}: {q}'s filter_scope is attributes or body")
        if not isinstance(options.get("raw_delivery", True), bool):
            raise TypeError(f"topic {name}: {q}'s raw_delivery must be a boolean")
        out[q] = dict(options)
    return name, out


def _check_references(
    c: Client, queues: list[tuple[str, QueueSettings]], topics: list[Topic]
) -> None:
    """Every queue a topic or a redrive policy names is in the file or on the node."""
    known = {name for name, _ in queues}
    wanted = {q for _, subs in topics for q in subs}
    for name, settings in queues:
        rp = settings.redrive_policy
        if rp is not None:
            dlq = rp.get("dead_letter_queue")
            if not isinstance(dlq, str) or not isinstance(rp.get("max_receive_count"), int):
                raise ValueError(f"queue {name}: redrive_policy needs dead_letter_queue and "
                                 "max_receive_count")  # fmt: skip
            wanted.add(dlq)
    missing = wanted - known
    if missing:
        missing -= set(c.list_queues())
    if missing:
        raise ValueError(f"queues named but neither defined nor on the node: {sorted(missing)}")


def import_(args: argparse.Namespace, c: Client) -> int:
    try:
        data = _read(args.file)
        queues = [_queue(q) for q in data.get("queues", [])]
        topics = [_topic(t) for t in data.get("topics", [])]
        _check_references(c, queues, topics)
    except (ValueError, KeyError, TypeError) as exc:
        print(f"dynaq: {args.file}: {exc}; nothing was changed", file=sys.stderr)
        return USAGE
    summary = _apply(c, queues, topics, sys.stderr.isatty() and not args.json)
    if args.json:
        emit_json(summary)
    else:
        print(
            f"queues: {summary['queues_created']} created, {summary['queues_updated']} updated; "
            f"topics: {summary['topics_created']} created; "
            f"subscriptions: {summary['subscriptions_set']} set"
        )
    return OK


def _apply(
    c: Client, queues: list[tuple[str, QueueSettings]], topics: list[Topic], progress: bool
) -> dict[str, int]:
    created = updated = topics_created = subscriptions = 0
    total = len(queues) + len(topics)
    for n, (name, settings) in enumerate(queues, 1):
        # The redrive policies after every queue exists: a DLQ may come later in the file.
        first = QueueSettings.from_dict({**settings.as_dict(), "redrive_policy": None})
        try:
            c.create_queue(name, first)
            created += 1
        except AlreadyExists:
            if first.patch():
                c.configure_queue(name, first)
            updated += 1
        if progress:
            print(f"\r{n}/{total}", end="", file=sys.stderr)
    for name, settings in queues:
        if settings.redrive_policy is not None:
            c.configure_queue(name, QueueSettings(redrive_policy=settings.redrive_policy))
    for n, (name, subs) in enumerate(topics, len(queues) + 1):
        try:
            c.create_topic(name)
            topics_created += 1
        except AlreadyExists:
            pass
        have = c.topic_subscriptions(name)
        for q, options in subs.items():
            full = {**DEFAULT_SUBSCRIPTION, **options}
            if have.get(q) != full:
                c.subscribe(
                    name,
                    q,
                    filter_policy=full["filter_policy"],
                    filter_scope=full["filter_scope"],
                    raw_delivery=full["raw_delivery"],
                )
                subscriptions += 1
        if progress:
            print(f"\r{n}/{total}", end="", file=sys.stderr)
    if progress:
        print(file=sys.stderr)
    return {
        "queues_created": created,
        "queues_updated": updated,
        "topics_created": topics_created,
        "subscriptions_set": subscriptions,
    }
