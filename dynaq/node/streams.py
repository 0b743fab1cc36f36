"""Builds the stream service of a node: its files live under ``<data.dir>/streams``."""

from __future__ import annotations

from pathlib import Path

from dynaq.clock import Clock
from dynaq.config import Config
from dynaq.streams import StreamService


def build_streams(config: Config, clock: Clock) -> StreamService:
    """One stream service per node (streams are node-local: see the README)."""
    return StreamService(Path(config.data.dir) / "streams", config.streams, clock)
