"""Configuration of the outbox relay (the ``[outbox]`` section)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OutboxConfig:
    """The transactional-outbox relay: where the table is and how hard to pull.

    ``dsn = ""`` turns the relay off. Defaults are goharvest's: 1000 records in
    flight, marks of 100 rows, 10 ms between empty marks, 500 ms after an I/O
    error, 30 s for a publish to complete before it counts as failed.
    """

    dsn: str = ""
    table: str = "outbox"
    max_in_flight: int = 1000
    mark_batch: int = 100
    mark_backoff_ms: int = 10
    io_error_backoff_ms: int = 500
    queue_timeout_s: float = 30.0
    max_publish_batch: int = 1000
    metrics_interval_s: float = 5.0

    @property
    def enabled(self) -> bool:
        return bool(self.dsn)
