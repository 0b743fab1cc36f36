"""Builds the stream service of a node: its files live under ``<data.dir>/streams``."""

from __future__ import annotations

from pathlib import Path

from dynaq.clock import Clock
from dynaq.config import Config
from dynaq.streams import StreamService


def build_streams(config: Config, clock: Clock, worker: int = 0) -> StreamService:
    """One stream service per node (streams are node-local: see the README); each
    worker of a node has its own directory (worker 0 the node's), and the ring of
    workers records which one serves each stream."""
    name = "streams" if worker == 0 else f"streams-w{worker}"
    return StreamService(Path(config.data.dir) / name, config.streams, clock)
