"""Relay events (goharvest's): leader acquired / refreshed / revoked / fenced, meter read.

Every event is logged and counted in statsd (``outbox.<table>.leader.<kind>``;
the meter as the gauge ``outbox.<table>.records_per_s``) by
:class:`EventReporter`; tests and embedders can add their own handlers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from dynaq.metrics import Metrics

log = logging.getLogger("dynaq.outbox")


@dataclass(frozen=True, slots=True)
class LeaderAcquired:
    """This node took the advisory lock and relays under a fresh ``leader_id``."""

    leader_id: UUID


@dataclass(frozen=True, slots=True)
class LeaderRefreshed:
    """A publish failed: a new ``leader_id`` re-marks every unacknowledged row."""

    leader_id: UUID


@dataclass(frozen=True, slots=True)
class LeaderRevoked:
    """The ring gave the table to another member; this node drained and let go."""

    reason: str = "ring changed"


@dataclass(frozen=True, slots=True)
class LeaderFenced:
    """The lock session failed: this node stopped relaying (another may take over)."""

    reason: str


@dataclass(frozen=True, slots=True)
class MeterRead:
    """Records relayed (published and purged) over the last interval."""

    records: int
    interval_s: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.interval_s if self.interval_s > 0 else 0.0


Event = LeaderAcquired | LeaderRefreshed | LeaderRevoked | LeaderFenced | MeterRead
EventHandler = Callable[[Event], None]


class EventReporter:
    """Logs every event and reports it to statsd."""

    def __init__(self, table: str, metrics: Metrics) -> None:
        self._table = table
        self._metrics = metrics
        self._prefix = f"outbox.{table}."

    def __call__(self, event: Event) -> None:
        extra = {"table": self._table}
        if isinstance(event, MeterRead):
            self._metrics.gauge(self._prefix + "records_per_s", event.records_per_s)
            if event.records:
                log.info(
                    "outbox meter",
                    extra={
                        **extra,
                        "records": event.records,
                        "records_per_s": round(event.records_per_s, 1),
                    },
                )
            return
        if isinstance(event, LeaderAcquired):
            kind, extra["leader_id"] = "acquired", str(event.leader_id)
        elif isinstance(event, LeaderRefreshed):
            kind, extra["leader_id"] = "refreshed", str(event.leader_id)
        elif isinstance(event, LeaderRevoked):
            kind, extra["reason"] = "revoked", event.reason
        else:
            kind, extra["reason"] = "fenced", event.reason
        self._metrics.incr(f"{self._prefix}leader.{kind}.count")
        if kind == "fenced":
            log.warning("outbox leader fenced", extra=extra)
        else:
            log.info("outbox leader %s", kind, extra=extra)
