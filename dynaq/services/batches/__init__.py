"""Batch-completion tracking; :class:`BatchService` is the one entry point."""

from dynaq.services.batches.service import (
    BLOCK_ITEMS,
    ESTIMATED,
    EXACT,
    BatchService,
    Completion,
    CompletionListener,
    Header,
)

__all__ = [
    "BLOCK_ITEMS",
    "ESTIMATED",
    "EXACT",
    "BatchService",
    "Completion",
    "CompletionListener",
    "Header",
]
