"""``dynaq batch open|show|add-items|ack|close|delete`` (batch-completion tracking)."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

from dynaq.cli.admin import common
from dynaq.cli.output import OK, emit_json, pairs, table
from dynaq.client import Client


def add_parser(sub: Any) -> None:
    batch = sub.add_parser("batch", help="batch-completion tracking")
    verbs = batch.add_subparsers(dest="verb", required=True)

    def mode(p: argparse.ArgumentParser) -> None:
        p.add_argument("--mode", choices=("exact", "estimated"), default="exact")

    p = verbs.add_parser("open", help="open a batch; prints its id")
    p.add_argument("--user-key", default=None)
    mode(p)
    common(p)
    p.set_defaults(handler=open_batch)
    for name, handler, text in (
        ("show", show, "a batch's state"),
        ("close", close, "close a batch (no more items)"),
        ("delete", delete, "delete a batch"),
    ):
        p = verbs.add_parser(name, help=text)
        p.add_argument("batch_id", type=int, metavar="BATCH_ID")
        mode(p)
        common(p)
        p.set_defaults(handler=handler)
    p = verbs.add_parser("add-items", help="add N items to an exact batch; prints the blocks")
    p.add_argument("batch_id", type=int, metavar="BATCH_ID")
    p.add_argument("items", type=int, metavar="N")
    common(p)
    p.set_defaults(handler=add_items)
    p = verbs.add_parser("ack", help="ack exact-batch items by id (BATCH:BLOCK:INDEX)")
    p.add_argument("item_ids", nargs="+", metavar="ITEM_ID")
    common(p)
    p.set_defaults(handler=ack)


def with_string_ids(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its ``batch_id`` as a decimal string: in ``--json`` every id is a
    string, as in the API's JSON (a batch id is an int63, past what a JavaScript or
    jq number holds exactly)."""
    return {k: str(v) if k == "batch_id" else v for k, v in data.items()}


def open_batch(args: argparse.Namespace, c: Client) -> int:
    batch_id = c.open_batch(args.mode, args.user_key)
    if args.json:
        emit_json(with_string_ids({"batch_id": batch_id, "mode": args.mode}))
    else:
        print(batch_id)
    return OK


def show(args: argparse.Namespace, c: Client) -> int:
    info = c.describe_batch(args.batch_id, args.mode)
    if args.json:
        emit_json(with_string_ids(asdict(info)))
    else:
        pairs(asdict(info))
    return OK


def close(args: argparse.Namespace, c: Client) -> int:
    complete = c.close_batch(args.batch_id, args.mode)
    if args.json:
        emit_json(with_string_ids({"batch_id": args.batch_id, "complete": complete}))
    else:
        print(f"batch {args.batch_id} closed; complete: {'yes' if complete else 'no'}")
    return OK


def delete(args: argparse.Namespace, c: Client) -> int:
    items = c.delete_batch(args.batch_id, args.mode)
    if args.json:
        emit_json(with_string_ids({"batch_id": args.batch_id, "items_removed": items}))
    else:
        print(f"batch {args.batch_id} deleted ({items} items)")
    return OK


def add_items(args: argparse.Namespace, c: Client) -> int:
    blocks = c.add_items(args.batch_id, args.items)
    if args.json:
        emit_json(
            {
                "batch_id": str(args.batch_id),
                "blocks": [{"id": b.id, "upto": b.upto} for b in blocks],
            }
        )
    else:
        table(
            [(b.id, b.upto, f"{b.batch_id}:{b.id}:0") for b in blocks],
            ["BLOCK", "UPTO", "FIRST_ITEM"],
        )
    return OK


def ack(args: argparse.Namespace, c: Client) -> int:
    done = c.ack_items(args.item_ids)
    if args.json:
        emit_json({"completed": [with_string_ids(asdict(d)) for d in done]})
    else:
        print(
            f"acked {len(args.item_ids)}; completed batches: {' '.join(str(d.batch_id) for d in done) or '-'}"
        )
    return OK
