"""The ``dynaq`` command.

Node commands (:mod:`dynaq.cli.node`): ``server``, ``migrate``, ``version``,
``outbox init-db``; they read the node's config. Admin commands speak to a
running node through :mod:`dynaq.client` like any other client:
``cluster``, ``queue``, ``topic``, ``stream``, ``batch``, ``definitions``
(:mod:`dynaq.cli.admin` explains ``--endpoint``, ``--token`` and ``--json``;
:mod:`dynaq.cli.output` the exit codes).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from dynaq.cli import admin, batches, cluster, definitions, node, queues, streams, topics


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dynaq", description="dynaq message-queue node and admin")
    sub = p.add_subparsers(dest="command", required=True)
    node.add_parsers(sub)
    for module in (cluster, queues, topics, streams, batches, definitions):
        module.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if getattr(args, "handler", None) is not None:
        raise SystemExit(admin.run(args))
    node.run(args)


__all__ = ["main", "parser"]
