"""``dynaq queue list|create|show|set|delete|peek|send|receive`` (and the task verbs
of :mod:`dynaq.cli.queue_tasks`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dynaq.cli import queue_tasks
from dynaq.cli.admin import common, number, readable
from dynaq.cli.output import OK, USAGE, emit_json, json_body, pairs, table, text_body
from dynaq.client import Client, NewMessage, QueueInfo, QueueSettings


def add_parser(sub: Any) -> None:
    queue = sub.add_parser("queue", help="queues: list, create, show, set, delete, messages")
    verbs = queue.add_subparsers(dest="verb", required=True)

    p = verbs.add_parser("list", help="every queue with its figures")
    common(p)
    p.set_defaults(handler=list_queues)

    for name, handler, text in (
        ("create", create, "create a queue (with settings)"),
        ("set", configure, "change settings of a queue"),
    ):
        p = verbs.add_parser(name, help=text)
        p.add_argument("name")
        settings_options(p)
        common(p)
        p.set_defaults(handler=handler)

    p = verbs.add_parser("show", help="a queue's settings and figures")
    p.add_argument("name")
    common(p)
    p.set_defaults(handler=show)

    p = verbs.add_parser("delete", help="delete a queue and its messages")
    p.add_argument("name")
    common(p)
    p.set_defaults(handler=delete)

    p = verbs.add_parser("peek", help="stored messages in id order, without taking them")
    p.add_argument("name")
    p.add_argument("--limit", type=int, default=20, help="how many (default 20)")
    p.add_argument("--from-id", type=int, default=0, help="start at this id")
    common(p)
    p.set_defaults(handler=peek)

    p = verbs.add_parser(
        "send", help="enqueue messages (bodies as arguments, or - for stdin lines)"
    )
    p.add_argument("name")
    p.add_argument("bodies", nargs="+", metavar="BODY")
    p.add_argument("--attr", action="append", default=[], metavar="K=V", help="an attribute")
    p.add_argument("--group", default=None, help="message group (delivered in order)")
    p.add_argument("--dedup-id", default=None, help="deduplication id (one body only)")
    common(p)
    p.set_defaults(handler=send)

    p = verbs.add_parser("receive", help="receive messages under a visibility timeout")
    p.add_argument("name")
    p.add_argument("--max", type=int, default=10, help="at most this many (default 10)")
    p.add_argument("--visibility-timeout", type=number, default=None, help="seconds")
    p.add_argument(
        "--wait",
        type=number,
        default=None,
        help="long-poll up to this many seconds (0..20; default: the queue's receive_wait_s)",
    )
    p.add_argument("--delete", action="store_true", help="delete (acknowledge) what was received")
    common(p)
    p.set_defaults(handler=receive)
    queue_tasks.add_verbs(verbs)


def settings_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--visibility-timeout", type=number, dest="visibility_timeout_s")
    p.add_argument("--min-partitions", type=int)
    p.add_argument("--max-partitions", type=int)
    p.add_argument("--max-partition-age", type=number, dest="max_partition_age_s")
    p.add_argument(
        "--compressed", action=argparse.BooleanOptionalAction, dest="compressed_messages"
    )
    p.add_argument("--delay", type=number, dest="delay_s", help="seconds new messages wait")
    p.add_argument("--retention", type=number, dest="retention_s", help="seconds kept")
    p.add_argument("--receive-wait", type=number, dest="receive_wait_s", help="default long poll")
    p.add_argument("--max-message-bytes", type=int)
    p.add_argument("--dead-letter-queue", metavar="QUEUE", help="with --max-receive-count: the DLQ")
    p.add_argument("--max-receive-count", type=int, metavar="N")
    p.add_argument("--fifo", action="store_true", default=None, help="a FIFO queue (at create)")
    p.add_argument("--content-based-dedup", action=argparse.BooleanOptionalAction)
    p.add_argument("--tag", action="append", metavar="K=V", help="a tag (repeat; replaces all)")


def settings_of(args: argparse.Namespace) -> QueueSettings:
    redrive = None
    if (args.dead_letter_queue is None) != (args.max_receive_count is None):
        raise ValueError("--dead-letter-queue and --max-receive-count go together")
    if args.dead_letter_queue is not None:
        redrive = {
            "dead_letter_queue": args.dead_letter_queue,
            "max_receive_count": args.max_receive_count,
        }
    tags = None
    if args.tag is not None:
        bad = [t for t in args.tag if "=" not in t]
        if bad:
            raise ValueError(f"--tag takes K=V, got {bad[0]!r}")
        tags = dict(t.split("=", 1) for t in args.tag)
    return QueueSettings(
        visibility_timeout_s=args.visibility_timeout_s,
        min_partitions=args.min_partitions,
        max_partitions=args.max_partitions,
        max_partition_age_s=args.max_partition_age_s,
        compressed_messages=args.compressed_messages,
        redrive_policy=redrive,
        delay_s=args.delay_s,
        retention_s=args.retention_s,
        receive_wait_s=args.receive_wait_s,
        max_message_bytes=args.max_message_bytes,
        fifo=args.fifo,
        content_based_dedup=args.content_based_dedup,
        tags=tags,
    )


def info_json(info: QueueInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "depth": info.depth,
        "visible": info.visible,
        "in_flight": info.in_flight,
        "delayed": info.delayed,
        "dead_lettered": info.dead_lettered,
        "oldest_age_s": info.oldest_age_s,
        "partitions": info.partitions,
        "settings": info.settings.as_dict(),
    }


def list_queues(args: argparse.Namespace, c: Client) -> int:
    # Only the queues this token may read (a 403 on one leaves it out: see readable).
    infos = [info for _, info in readable(c.list_queues(), c.describe_queue)]
    if args.json:
        emit_json({"queues": [info_json(i) for i in infos]})
        return OK
    table(
        [
            (i.name, i.visible, i.in_flight, i.delayed, i.dead_lettered, f"{i.oldest_age_s:.0f}",
             i.partitions, i.settings.visibility_timeout_s)
            for i in infos
        ],
        ["NAME", "VISIBLE", "IN_FLIGHT", "DELAYED", "DEAD_LETTERED", "OLDEST_S", "PARTITIONS",
         "VISIBILITY_S"],
    )  # fmt: skip
    return OK


def create(args: argparse.Namespace, c: Client) -> int:
    c.create_queue(args.name, settings_of(args))
    return _after_change(args, c, "created")


def configure(args: argparse.Namespace, c: Client) -> int:
    settings = settings_of(args)
    if not settings.patch():
        print("dynaq: give at least one setting to change", file=sys.stderr)
        return USAGE
    c.configure_queue(args.name, settings)
    return _after_change(args, c, "updated")


def _after_change(args: argparse.Namespace, c: Client, what: str) -> int:
    info = c.describe_queue(args.name)
    if args.json:
        emit_json(info_json(info))
    else:
        print(f"queue {args.name} {what}")
        pairs(info.settings.as_dict())
    return OK


def show(args: argparse.Namespace, c: Client) -> int:
    info = c.describe_queue(args.name)
    if args.json:
        emit_json(info_json(info))
        return OK
    pairs(
        {
            "name": info.name,
            "depth": info.depth,
            "visible": info.visible,
            "in_flight": info.in_flight,
            "delayed": info.delayed,
            "dead_lettered": info.dead_lettered,
            "oldest_age_s": f"{info.oldest_age_s:.1f}",
            "partitions": info.partitions,
            **info.settings.as_dict(),
        }
    )
    return OK


def delete(args: argparse.Namespace, c: Client) -> int:
    c.delete_queue(args.name)
    if args.json:
        emit_json({"deleted": args.name})
    else:
        print(f"queue {args.name} deleted")
    return OK


def peek(args: argparse.Namespace, c: Client) -> int:
    page = c.browse(args.name, args.from_id, args.limit)
    if args.json:
        emit_json(
            {
                "messages": [
                    {
                        "id": str(m.id),
                        "enqueued_at_ms": m.enqueued_at_ms,
                        **json_body(m.body),
                        "attributes": m.attributes or {},
                    }
                    for m in page.messages
                ],
                "next_from_id": None if page.next_from_id is None else str(page.next_from_id),
            }
        )
        return OK
    table(
        [(str(m.id), m.enqueued_at_ms, text_body(m.body, 60)) for m in page.messages],
        ["ID", "ENQUEUED_MS", "BODY"],
    )
    if page.next_from_id is not None:
        print(f"(more: --from-id {page.next_from_id})")
    return OK


def send(args: argparse.Namespace, c: Client) -> int:
    attrs: dict[str, str] = {}
    for a in args.attr:
        key, eq, value = a.partition("=")
        if not eq or not key:
            print(f"dynaq: --attr wants KEY=VALUE, got {a!r}", file=sys.stderr)
            return USAGE
        attrs[key] = value
    bodies = [
        b for arg in args.bodies for b in (sys.stdin.read().splitlines() if arg == "-" else [arg])
    ]
    if args.dedup_id is not None and len(bodies) != 1:
        print("dynaq: --dedup-id goes with exactly one body", file=sys.stderr)
        return USAGE
    ids = c.enqueue(
        args.name, [NewMessage(b, attrs or None, args.group, args.dedup_id) for b in bodies]
    )
    if args.json:
        emit_json({"ids": [str(i) for i in ids]})
    else:
        for i in ids:
            print(i)
    return OK


def receive(args: argparse.Namespace, c: Client) -> int:
    got = c.receive(args.name, args.max, args.visibility_timeout, wait_time_s=args.wait)
    deleted = c.delete(args.name, [m.id for m in got]) if args.delete and got else 0
    if args.json:
        emit_json(
            {
                "messages": [
                    {
                        "id": str(m.id),
                        **json_body(m.body),
                        "receive_count": m.receive_count,
                        "enqueued_at_ms": m.enqueued_at_ms,
                        "attributes": m.attributes or {},
                        "group": m.group,
                    }
                    for m in got
                ],
                "deleted": deleted,
            }
        )
        return OK
    table(
        [(str(m.id), m.receive_count, text_body(m.body, 60)) for m in got],
        ["ID", "RECEIVES", "BODY"],
    )
    if args.delete:
        print(f"deleted {deleted}")
    return OK
