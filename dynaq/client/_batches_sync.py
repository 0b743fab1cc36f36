"""The batch-tracking methods of :class:`dynaq.client.Client` (blocking); the asyncio
twin is :mod:`dynaq.client._batches_async` (see :mod:`dynaq.client.ops_batches`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from dynaq.client import ops_batches
from dynaq.client.ops import Op
from dynaq.client.types import BatchCompletion, BatchInfo, ItemBlock

T = TypeVar("T")


class SyncBatches:
    """Mixed into :class:`~dynaq.client.Client`, which provides ``_run``."""

    def _run(self, op: Op[T]) -> T:
        raise NotImplementedError  # the client's

    def open_batch(self, mode: str = "exact", user_key: str | None = None) -> int:
        return self._run(ops_batches.open_batch(mode, user_key))

    def add_items(self, batch_id: int, items: int) -> list[ItemBlock]:
        """Add ``items`` items to an exact batch; the blocks naming them."""
        return self._run(ops_batches.add_items(batch_id, items))

    def ack_items(self, item_ids: Sequence[str]) -> list[BatchCompletion]:
        """Ack exact-batch items (twice is harmless); the batches this completed."""
        return self._run(ops_batches.ack_items(item_ids))

    def close_batch(self, batch_id: int, mode: str = "exact") -> bool:
        """Close the batch; whether it is complete."""
        return self._run(ops_batches.close_batch(batch_id, mode))

    def describe_batch(self, batch_id: int, mode: str = "exact") -> BatchInfo:
        return self._run(ops_batches.describe_batch(batch_id, mode))

    def delete_batch(self, batch_id: int, mode: str = "exact") -> int:
        """Delete a batch; how many items went with it."""
        return self._run(ops_batches.delete_batch(batch_id, mode))

    def remove_batches(self, mode: str, state: str, since_ms: int) -> tuple[int, int]:
        """Remove ``open`` or ``closed`` batches last active before ``since_ms``;
        ``(batches, items)`` removed."""
        return self._run(ops_batches.remove_batches(mode, state, since_ms))

    def incr_batch(self, batch_id: int, by: int = 1) -> BatchInfo:
        """Estimated mode: add ``by`` to the pending count."""
        return self._run(ops_batches.incr_batch(batch_id, by))

    def decr_batches(self, acks: Mapping[int, int]) -> list[BatchCompletion]:
        """Estimated mode: subtract ``{batch_id: by}``; the batches this completed."""
        return self._run(ops_batches.decr_batches(acks))
