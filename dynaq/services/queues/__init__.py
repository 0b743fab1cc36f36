"""Queues: the :class:`QueueService` facade and the parts it is composed of.

* :mod:`.service` -- the facade the API and the node use.
* :mod:`.state` -- per-queue serving state and depth; :mod:`.stats` -- the
  ring-wide figures.
* :mod:`.writes` -- limits, id allocation, the three-phase write a topic's
  fanout shares (``prepare``/``note_written``); :mod:`.dedup` -- the dedup guard
  and its records.
* :mod:`.receive` -- long poll, expired in-flight messages, partition scans;
  :mod:`.ring_poll` -- long polls over every node's slice; :mod:`.lane_probe`.
* :mod:`.deletes` -- deletes and their listeners; :mod:`.receipts` -- deletes
  and visibility changes by receipt.
* :mod:`.transactions` -- delete received messages and enqueue outputs, all or nothing.
* :mod:`.dead_letters`, :mod:`.delays`, :mod:`.retention` -- dead letters,
  delayed messages, retention.
* :mod:`.tasks` (with :mod:`.task_record` and :mod:`.purge`) -- redrive and
  purge tasks with readable progress; :mod:`.task_index` -- their per-queue
  index; :mod:`.task_retention` -- finished tasks' records swept.
* :mod:`.upkeep` -- the dedup and task-record sweepers, purges of deleted queues.
* :mod:`.handover` -- hints to slice owners and the graceful-leave handover.
* :mod:`.crash_point` -- the test hook that kills the node at a named step.
"""

from dynaq.services.queue_records import MAX_WAIT_S
from dynaq.services.queues.handover import PeerHints
from dynaq.services.queues.service import DeleteListener, QueueService
from dynaq.services.queues.transactions import (
    Enqueued,
    Transactions,
    TxnDelete,
    TxnEnqueue,
    TxnOutcome,
)
from dynaq.services.queues.writes import (
    MAX_TAG_BYTES,
    Limits,
    PreparedWrite,
    Writer,
)

__all__ = [
    "MAX_TAG_BYTES",
    "MAX_WAIT_S",
    "DeleteListener",
    "Enqueued",
    "Limits",
    "PeerHints",
    "PreparedWrite",
    "QueueService",
    "Transactions",
    "TxnDelete",
    "TxnEnqueue",
    "TxnOutcome",
    "Writer",
]
