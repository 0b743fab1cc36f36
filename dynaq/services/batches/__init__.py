"""Batch-completion tracking (Carlyle's design): know when a fan-out of N items is done.

A producer opens a batch, adds items in blocks (each block is ``{id, upto}``;
the client expands it into item ids ``batchId:id:0 .. upto-1``), closes the
batch, and consumers ack items. The batch is **complete** when it is closed
and every item is acked; the one call that makes it so (the close, or the
last ack) reports it, exactly once, and a completion event goes to the
configured topic.

**Exact mode** keeps each block as a bitfield (1 = not yet acked) in one
store record, and the batch header counts the blocks not yet retired. Acking
clears bits with a conditional put on the block (version check), so
concurrent acks from many nodes never lose a clear; a block whose last bit
is cleared is subtracted from the header's count with a conditional put too,
and the conditional put that takes a closed batch's count to zero (with no
add in flight) is the one completion. Acking an item twice changes nothing.

**Whatever fails in between** (a crash, a cancellation, a store error or a
write whose outcome is unknown), a closed batch whose items are all acked
completes exactly once and its completion is delivered: the multi-record
steps (counting an emptied block, adding items) are idempotent and leave a
repair marker while they run (``settle``); the flip to complete is preceded
by a stored completion record that the relay delivers with retries
(``relay``); the reaper's round repairs what an interrupted step left
(``reconcile``).

On one node, concurrent ack requests for a batch are **combined**: one task
per batch reads every block the waiting requests touch in one read, applies
all their clears, and writes each changed block once (the embedded store
group-commits those puts together). Conflicts with other nodes are retried
block by block.

**Estimated mode** keeps one counter (incr by N, decr by N): cheap, but an
item acked twice is counted twice, so a batch can complete early. A ``decr``
is checked whole before any of it applies. On one node, concurrent decrements
of a batch are **coalesced**: those that arrive while its header's update is
in flight are applied together in the next one (one conditional put), and
each caller is answered, once that put is durable, with what its own part did.

Storage never mixes plain and conditional writes on a key (Cassandra orders
the two with different clocks): headers, blocks, markers and completion
records are written only with ``put_if_absent``/``put_if_version`` and removed
with ``delete``.

Where each part lives: :class:`BatchService` (``service``) is the facade;
``records`` holds the stored formats, ``headers`` the versioned header
updates, ``exact`` and ``estimated`` the two modes (``decrements`` the
latter's coalescing), ``settle`` exact mode's
recoverable multi-record steps, ``relay`` completion delivery, ``reaper``
the removal of idle batches and ``reconcile`` its repair pass, and ``hooks``
the wiring to queues (item acks before deletes) and topics (completion events).
"""

from dynaq.errors import DecrIncomplete
from dynaq.services.batches.estimated import DecrFailure
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
