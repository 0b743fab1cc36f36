"""``dynaq cluster status``: the node's health and the ring's members with their slices."""

from __future__ import annotations

import argparse
from typing import Any

from dynaq.cli.admin import common
from dynaq.cli.output import OK, UNAVAILABLE, emit_json, table
from dynaq.client import Client

LANES = 1024
_LANE_SHIFT = 53
"""An id's top 10 bits (of 63) are its lane: a slice is a range of lanes."""


def add_parser(sub: Any) -> None:
    cluster = sub.add_parser("cluster", help="the ring")
    verbs = cluster.add_subparsers(dest="verb", required=True)
    p = verbs.add_parser("status", help="health of the endpoint, members and their slices")
    common(p)
    p.set_defaults(handler=status)


def status(args: argparse.Namespace, c: Client) -> int:
    """Exit 0 when the endpoint serves, 6 when it is starting or draining."""
    health = c.health()
    members = c.ring()
    if args.json:
        emit_json(
            {
                "endpoint": c.addr,
                "status": health.status,
                "node": health.node,
                **(
                    {}
                    if health.worker is None
                    else {
                        "worker": health.worker,
                        "workers": health.workers,
                        "workers_live": health.workers_live,
                    }
                ),
                "members": [
                    {
                        "name": m.name,
                        "http": m.http,
                        "from_id": str(m.from_id),
                        "to_id": str(m.to_id),
                        "lanes": _lanes(m.from_id, m.to_id),
                    }
                    for m in members
                ],
            }
        )
    else:
        # A node of several workers is one member (the node); which worker answered.
        who = f"node {health.node}, {len(members)} members"
        if health.worker is not None:
            who += f"; answered by {health.worker}, {health.workers_live} of {health.workers}"
            who += " workers live"
        print(f"endpoint {c.addr}: {health.status} ({who})")
        table(
            [
                (m.name, m.http, _lanes(m.from_id, m.to_id), str(m.from_id), str(m.to_id))
                for m in members
            ],
            ["MEMBER", "HTTP", "LANES", "FROM_ID", "TO_ID"],
        )
    return OK if health.status == "serving" else UNAVAILABLE


def _lanes(from_id: int, to_id: int) -> int:
    return (to_id >> _LANE_SHIFT) - (from_id >> _LANE_SHIFT) + 1
