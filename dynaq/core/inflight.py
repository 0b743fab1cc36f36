"""A served message's in-flight record, and the delivery numbers its receipts name."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass


@dataclass(slots=True)
class InFlight:
    """A served, not yet deleted message."""

    deadline: float
    receive_count: int
    lane: int
    group: str | None = None
    attributes: dict[str, str] | None = None
    """Kept so a delete on this node can tell listeners (batch item acks) without a read."""
    delivery: int = 0
    """The latest delivery's number (its receipt names it); 0 when unknown (handed over)."""
    claimed: bool = False
    """A transaction holds this delivery between its receipt check and its write: no
    other transaction may claim it (until it is released or served again)."""
    unclaimed_deadline: float = 0.0
    """While claimed: the deadline before the claim, restored if the claim is released."""
    first_received_ms: int = 0
    """Wall-clock ms of the first delivery on this node (0: unknown, e.g. handed over)."""


_deliveries = itertools.count(random.getrandbits(40) << 20 | 1)
"""Delivery numbers: distinct within a node's run, and from a random start so a
receipt from before a restart does not match a delivery after it."""
next_delivery = _deliveries.__next__
"""The next delivery number (bound once: it is taken for every served message)."""
