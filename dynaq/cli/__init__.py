"""The ``dynaq`` command.

Node commands (:mod:`dynaq.cli.node`): ``server``, ``migrate``, ``version``,
``outbox init-db``; they read the node's config. Admin commands speak to a
running node through :mod:`dynaq.client` like any other client:
``cluster``, ``queue``, ``topic``, ``stream``, ``batch``, ``definitions``.
``worker`` (:mod:`dynaq.cli.worker`) runs a processing graph
(:mod:`dynaq.cli.admin` explains ``--endpoint``, ``--token`` and ``--json``;
:mod:`dynaq.cli.output` the exit codes).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from dynaq.cli import admin, batches, cluster, definitions, node, queues, streams, topics, worker


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dynaq", description="dynaq message-queue node and admin")
    sub = p.add_subparsers(dest="command", required=True)
    node.add_parsers(sub)
    for module in (cluster, queues, topics, streams, batches, definitions, worker):
        module.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if getattr(args, "run", None) is not None:  # the worker: a process of its own
        raise SystemExit(args.run(args))
    if getattr(args, "handler", None) is not None:
        raise SystemExit(admin.run(args))
    node.run(args)


__all__ = ["main", "parser"]
