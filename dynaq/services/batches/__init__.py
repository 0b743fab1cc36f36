"""Batch-completion tracking (Carlyle's design): know when a fan-out of N items is done.

A producer opens a batch, adds items in blocks (each block is ``{id, upto}``;
the client expands it into item ids ``batchId:id:0 .. upto-1``), closes the
batch, and consumers ack items. The batch is **complete** when it is closed
and every item is acked; the one call that makes it so (the close, or the
last ack) reports it, exactly once, and a completion event goes to the
configured topic.

**Exact mode** keeps each block as a bitfield (1 = not yet acked) in one
store record, and the batch header counts the blocks that still have a bit
set. Acking clears bits with a conditional put on the block (version check),
so concurrent acks from many nodes never lose a clear; a block whose last
bit is cleared decrements the header's count with a conditional put too, and
the conditional put that takes a closed batch's count to zero is the one
completion. Acking an item twice changes nothing.

On one node, concurrent ack requests for a batch are **combined**: one task
per batch reads every block the waiting requests touch in one read, applies
all their clears, and writes each changed block once (the embedded store
group-commits those puts together). Conflicts with other nodes are retried
block by block.

**Estimated mode** keeps one counter (incr by N, decr by N): cheap, but an
item acked twice is counted twice, so a batch can complete early.

Storage never mixes plain and conditional writes on a key (Cassandra orders
the two with different clocks): headers and blocks are written only with
``put_if_absent``/``put_if_version`` and removed with ``delete``.

Where each part lives: :class:`BatchService` (``service``) is the facade;
``records`` holds the stored formats, ``headers`` the versioned header
updates and completion dispatch, ``exact`` and ``estimated`` the two modes,
``reaper`` the removal of idle batches, and ``hooks`` the wiring to queues
(item acks on delete) and topics (completion events).
"""

from dynaq.services.batches.estimated import DecrFailure, DecrIncomplete
from dynaq.services.batches.records import (
    BLOCK_ITEMS,
    ESTIMATED,
    EXACT,
    BatchHeader,
    Completion,
    CompletionListener,
)
from dynaq.services.batches.service import BatchService

__all__ = [
    "BLOCK_ITEMS",
    "ESTIMATED",
    "EXACT",
    "BatchHeader",
    "BatchService",
    "Completion",
    "CompletionListener",
    "DecrFailure",
    "DecrIncomplete",
]
