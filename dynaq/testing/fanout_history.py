"""What a topic-fanout run observed, and its checker (see :mod:`dynaq.testing.fanout`).

:func:`check_fanout` judges a :class:`FanoutHistory` on what was delivered, not
on what the node says: every acknowledged message must be delivered from every
queue it belongs to (``lost``), a message seen in any of its queues must be seen
in all of them (``partial``: an unanswered publish may have landed, but only
whole), none may be delivered from a queue that does not want it
(``misrouted``), and each acknowledged publish must name exactly its queues
(``wrong_answers``). Which queues a message belongs to is the workload's
oracle (``Publish.routes``), or every queue when nothing filters.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from dynaq.testing.history import History, Outcome


@dataclass
class Publish:
    """One publish request: its tokens and what its answer said."""

    tokens: list[str]
    outcome: Outcome = "unknown"
    endpoint: str = ""
    ids: dict[str, list[str]] = field(default_factory=dict)
    """queue -> the ids its copies got, as the answer said."""
    routes: dict[str, list[str]] = field(default_factory=dict)
    """token -> the queues that should get it (every queue when nothing filters)."""


@dataclass
class FanoutHistory:
    """What one fanout run observed; ``faults`` and the clock come from a :class:`History`."""

    queues: tuple[str, ...]
    history: History = field(default_factory=History)
    publishes: list[Publish] = field(default_factory=list)
    delivered: dict[str, Counter[str]] = field(default_factory=dict)
    """queue -> token -> how many times it was received there."""
    drained: bool | None = None

    def dump(self) -> str:
        """The history as JSON (for a failing run's artifacts)."""
        return json.dumps(
            {
                "queues": list(self.queues),
                "publishes": [dataclasses.asdict(p) for p in self.publishes],
                "delivered": {q: dict(c) for q, c in self.delivered.items()},
                "faults": [dataclasses.asdict(f) for f in self.history.faults],
                "responses": dict(self.history.responses),
                "drained": self.drained,
            }
        )


@dataclass(frozen=True)
class FanoutVerdict:
    """The checker's findings. ``lost`` and ``partial`` must be 0."""

    acked: int
    """Messages whose publish was acknowledged."""
    lost: int
    """(acknowledged message, queue) pairs never delivered from that queue."""
    partial: int
    """Messages delivered from some of the queues they belong to but never from others."""
    duplicates: int
    examples: dict[str, list[str]]
    misrouted: int = 0
    """(message, queue) pairs delivered from a queue whose filter refuses the message."""
    wrong_answers: int = 0
    """Acknowledged publishes whose answer named other queues than the filters pick."""

    @property
    def ok(self) -> bool:
        return (
            self.acked > 0
            and self.lost == 0
            and self.partial == 0
            and self.misrouted == 0
            and self.wrong_answers == 0
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "acked": self.acked,
            "lost": self.lost,
            "partial": self.partial,
            "misrouted": self.misrouted,
            "wrong_answers": self.wrong_answers,
            "duplicates": self.duplicates,
            "ok": self.ok,
        }


def check_fanout(fh: FanoutHistory) -> FanoutVerdict:
    """Judge a fanout history: every acknowledged message in every queue it belongs
    to, every message that reached any of its queues in all of them, none in a
    queue that does not want it, and every answer naming exactly its queues."""
    routes: dict[str, set[str]] = {}
    for p in fh.publishes:
        for t in p.tokens:
            routes[t] = set(p.routes.get(t, fh.queues))
    acked = {t for p in fh.publishes if p.outcome == "ok" for t in p.tokens}
    seen_anywhere = set().union(*(set(c) for c in fh.delivered.values()))
    lost = [
        f"{t}@{q}"
        for t in sorted(acked)
        for q in sorted(routes[t])
        if not fh.delivered[q].get(t, 0)
    ]
    partial = sorted(
        t
        for t in seen_anywhere
        if t not in acked and any(not fh.delivered[q].get(t, 0) for q in routes.get(t, ()))
    )
    misrouted = sorted(
        f"{t}@{q}" for q, got in fh.delivered.items() for t in got if q not in routes.get(t, ())
    )
    wrong = [
        f"{p.tokens[0]}..: answer {_answered(p)} != {_expected_ids(p, fh.queues)}"
        for p in fh.publishes
        if p.outcome == "ok" and _answered(p) != _expected_ids(p, fh.queues)
    ]
    duplicates = sum(n - 1 for c in fh.delivered.values() for n in c.values() if n > 1)
    return FanoutVerdict(
        acked=len(acked),
        lost=len(lost),
        partial=len(partial),
        duplicates=duplicates,
        misrouted=len(misrouted),
        wrong_answers=len(wrong),
        examples={
            "lost": lost[:10],
            "partial": partial[:10],
            "misrouted": misrouted[:10],
            "wrong_answers": wrong[:10],
        },
    )


def _answered(p: Publish) -> dict[str, int]:
    """How many ids the publish's answer gave each queue (queues with none left out)."""
    return {q: len(ids) for q, ids in p.ids.items() if ids}


def _expected_ids(p: Publish, queues: tuple[str, ...]) -> dict[str, int]:
    """How many of ``p``'s messages each queue should have taken: those routed to
    it, or every message in every queue when nothing filters."""
    if not p.routes:
        return {q: len(p.tokens) for q in queues} if p.tokens else {}
    counts = Counter(q for qs in p.routes.values() for q in qs)
    return dict(counts)
