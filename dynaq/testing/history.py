"""A history checker for dynaq queues: what producers and consumers saw, and what it proves.

Producers and consumers record every operation through the real API into a
:class:`History`: each enqueue's invocation and its outcome (acknowledged with
an id, failed, or unknown because the request died with a node), each
receive, and each delete, beside the faults injected and the batches opened.
:func:`check` then reads the whole history and gives a :class:`Verdict`
(lost, duplicates with their causes, id reuse, group order, dedup, batches):
this module is the record, :mod:`dynaq.testing.verdict` the judgement
(``check`` and ``Verdict`` are also importable from :mod:`dynaq.testing`).

Every message body carries a unique token, so a message is known by what was
sent, not by the id a node gave it. Times are ``time.monotonic()`` of the
process that ran the workload.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Literal

Outcome = Literal["ok", "failed", "unknown"]


@dataclass(slots=True)
class Enqueue:
    """One message sent: its token, group, dedup id, and what the node answered."""

    token: str
    invoked: float
    group: str | None = None
    dedup_id: str | None = None
    completed: float | None = None
    outcome: Outcome = "unknown"
    message_id: int | None = None


@dataclass(slots=True)
class Delivery:
    """One message received by a consumer."""

    token: str
    message_id: int
    received: float
    """When the receive response arrived."""
    invoked: float
    """When that receive was sent (the server served it in between)."""
    visibility_timeout_s: float
    receive_count: int = 0
    delete_invoked: float | None = None
    delete_outcome: Outcome | None = None
    delete_completed: float | None = None
    """When the delete's answer arrived (or its request failed)."""
    receipt: str | None = None
    """The receipt the node gave (its delivery number tells which node's in-flight
    table served it: each node process numbers its deliveries from a random start)."""


@dataclass(slots=True)
class Fault:
    """A fault injected into the system under test (kill -9, restart, clock step...)."""

    kind: str
    started: float
    ended: float | None = None
    detail: str = ""
    explains_redelivery: bool = True
    """Whether a redelivery near it counts as ``node_fault`` (a node died, restarted
    or was cut off). ``False`` for faults after which the service must keep every
    lock, such as a clock step on a running node."""


@dataclass(slots=True)
class TrackedBatch:
    """One exact batch the workload opened: its items are the messages ``tokens``."""

    batch_id: str
    tokens: list[str]
    opened: float
    closed: Outcome = "unknown"
    closed_at: float | None = None
    """When the close's answer arrived."""
    close_said_complete: bool = False
    status_complete: bool | None = None
    """What the last status read said after the drain (``None``: never read)."""


@dataclass
class History:
    """Everything one workload run observed. Not thread-safe; one event loop records."""

    enqueues: list[Enqueue] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    batches: dict[str, TrackedBatch] = field(default_factory=dict)
    """Batches the workload opened, by batch id (items tagged on its messages)."""
    completions: Counter[str] = field(default_factory=Counter)
    """Batch id -> distinct completion events read from the completion topic."""
    completion_events: bool = False
    """Whether the completion topic was read (else completions are known from
    batch status reads only, which show a completion but not a repeat)."""
    drained: bool | None = None
    """Whether consumers drained the queue until it stayed quiet (``False``: the drain
    hit its time bound while messages were still arriving, so what was not
    delivered may be a backlog rather than lost; ``None``: not recorded)."""
    responses: Counter[str] = field(default_factory=Counter)
    """``"<operation> <status> [<error code>]"`` -> how many answers (``exc`` for a
    request that got no answer): what the workload saw, e.g. the 503s of an outage."""

    @staticmethod
    def now() -> float:
        return time.monotonic()

    def sent(self, token: str, group: str | None = None, dedup_id: str | None = None) -> Enqueue:
        e = Enqueue(token, self.now(), group, dedup_id)
        self.enqueues.append(e)
        return e

    def fault(self, kind: str, detail: str = "", *, explains_redelivery: bool = True) -> Fault:
        f = Fault(kind, self.now(), detail=detail, explains_redelivery=explains_redelivery)
        self.faults.append(f)
        return f

    def dump(self) -> str:
        """The history as JSON (for a failing run's artifacts)."""
        return json.dumps(
            {
                "enqueues": [asdict(e) for e in self.enqueues],
                "deliveries": [asdict(d) for d in self.deliveries],
                "faults": [asdict(f) for f in self.faults],
                "completions": dict(self.completions),
                "batches": [asdict(b) for b in self.batches.values()],
                "responses": dict(self.responses),
                "drained": self.drained,
            }
        )
