"""``dynaq topic list|create|show|delete|subscribe|unsubscribe|publish``."""

from __future__ import annotations

import argparse
from typing import Any

from dynaq.cli.admin import common, readable
from dynaq.cli.output import OK, emit_json, table
from dynaq.client import Client


def add_parser(sub: Any) -> None:
    topic = sub.add_parser("topic", help="topics and their subscriptions")
    verbs = topic.add_subparsers(dest="verb", required=True)
    p = verbs.add_parser("list", help="every topic with its subscribed queues")
    common(p)
    p.set_defaults(handler=list_topics)
    for name, handler, text in (
        ("create", create, "create a topic"),
        ("show", show, "a topic's subscribed queues"),
        ("delete", delete, "delete a topic (its queues stay)"),
    ):
        p = verbs.add_parser(name, help=text)
        p.add_argument("name")
        common(p)
        p.set_defaults(handler=handler)
    for name, handler, text in (
        ("subscribe", subscribe, "subscribe a queue to a topic"),
        ("unsubscribe", unsubscribe, "unsubscribe a queue from a topic"),
    ):
        p = verbs.add_parser(name, help=text)
        p.add_argument("name", metavar="TOPIC")
        p.add_argument("queue", metavar="QUEUE")
        common(p)
        p.set_defaults(handler=handler)
    p = verbs.add_parser("publish", help="publish messages to every subscribed queue")
    p.add_argument("name", metavar="TOPIC")
    p.add_argument("bodies", nargs="+", metavar="BODY")
    common(p)
    p.set_defaults(handler=publish)


def list_topics(args: argparse.Namespace, c: Client) -> int:
    # Only the topics this token may read (a 403 on one leaves it out: see readable).
    topics = dict(readable(c.list_topics(), c.topic_queues))
    if args.json:
        emit_json({"topics": [{"name": n, "queues": q} for n, q in topics.items()]})
    else:
        table([(n, ",".join(q) or "-") for n, q in topics.items()], ["TOPIC", "QUEUES"])
    return OK


def create(args: argparse.Namespace, c: Client) -> int:
    c.create_topic(args.name)
    return _report(args, {"topic": args.name, "queues": []}, f"topic {args.name} created")


def show(args: argparse.Namespace, c: Client) -> int:
    queues = c.topic_queues(args.name)
    if args.json:
        emit_json({"topic": args.name, "queues": queues})
    else:
        table([(q,) for q in queues], ["QUEUE"])
    return OK


def delete(args: argparse.Namespace, c: Client) -> int:
    c.delete_topic(args.name)
    return _report(args, {"deleted": args.name}, f"topic {args.name} deleted")


def subscribe(args: argparse.Namespace, c: Client) -> int:
    # Asked first: a missing topic or queue is a 404 here (exit 3; the v1 subscribe
    # route answers 422), and an existing subscription keeps its options (a filter
    # policy set through the API or SNS must not be dropped by a re-run).
    current = c.topic_subscriptions(args.name)
    c.describe_queue(args.queue)
    if args.queue in current:
        queues = list(current)
        said = f"{args.queue} already subscribed to {args.name}"
    else:
        queues = c.subscribe(args.name, args.queue)
        said = f"{args.queue} subscribed to {args.name}"
    return _report(args, {"topic": args.name, "queues": queues}, said)


def unsubscribe(args: argparse.Namespace, c: Client) -> int:
    queues = c.unsubscribe(args.name, args.queue)
    return _report(
        args, {"topic": args.name, "queues": queues}, f"{args.queue} unsubscribed from {args.name}"
    )


def publish(args: argparse.Namespace, c: Client) -> int:
    ids = c.publish(args.name, list(args.bodies))
    if args.json:
        emit_json({"ids": {q: [str(i) for i in v] for q, v in ids.items()}})
    else:
        table(
            [(q, len(v), " ".join(str(i) for i in v)) for q, v in ids.items()],
            ["QUEUE", "SENT", "IDS"],
        )
    return OK


def _report(args: argparse.Namespace, data: dict[str, Any], text: str) -> int:
    if args.json:
        emit_json(data)
    else:
        print(text)
    return OK
