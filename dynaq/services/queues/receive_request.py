"""One receive's own state: whether its caller still waits, and what it took.

A long poll whose caller has gone (its connection closed) stops before it
serves anything more (:data:`StillWanted`).

A message group is served in order with, by default, one message in flight at
a time. A receive may take up to ``per_group`` messages of one group
together (SQS FIFO receives: MaxNumberOfMessages of one group, in order);
the group stays blocked for every other receive until all of them are
deleted or visible again. Taking several is safe only for messages that
follow each other in the group, so a scan extends a group's run only with
the group's next message in the same page read (see
:meth:`dynaq.services.queues.receive.Receiver`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

StillWanted = Callable[[], bool]
"""Whether the caller of a long poll is still there to take an answer (its
connection open): a poll whose caller went away must not make messages invisible."""


def always_wanted() -> bool:
    return True


@dataclass(slots=True)
class ReceiveTake:
    """The ids one receive served that it must recognise again (group messages, and
    any served with a visibility timeout of 0), and how many of each group."""

    per_group: int = 1
    ids: set[int] = field(default_factory=set)
    by_group: dict[str, int] = field(default_factory=dict)

    def took(self, message_id: int, group: str | None) -> None:
        self.ids.add(message_id)
        if group is not None:
            self.by_group[group] = self.by_group.get(group, 0) + 1

    def group_full(self, group: str) -> bool:
        """Whether this receive took as many of ``group`` as it may."""
        return self.by_group.get(group, 0) >= self.per_group
