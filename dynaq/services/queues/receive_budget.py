"""How much one receive may take: a byte budget, and how many rows to read for it."""

from __future__ import annotations


class ReceiveBudget:
    """The bytes one receive may still take (see
    :meth:`~dynaq.services.queues.receive.Receiver.receive`), and how many rows to
    read for it: the store returns rows whole, so a page of 1,000 rows of 256 KiB
    reads 256 MiB however few of them the budget lets through."""

    __slots__ = ("_prior", "count", "left", "taken")

    UNKNOWN_ROWS = 64
    """Rows read at most while the size of the queue's messages is unknown."""
    MIN_READ_BYTES = 64 * 1024
    """A page is allowed this many bytes whatever the budget left: a scan that skips
    rows in flight must not take one read per row when the rows are small."""

    def __init__(self, max_bytes: int, mean: float) -> None:
        self.left = max_bytes
        self._prior = mean
        """The queue's last receive's mean message size (0: unknown)."""
        self.taken = 0
        self.count = 0

    def take(self, n: int) -> None:
        self.left -= n
        self.taken += n
        self.count += 1

    @property
    def mean(self) -> float:
        """Mean message size: this receive's, else the queue's last receive's (0: unknown)."""
        return self.taken / self.count if self.count else self._prior

    @property
    def spent(self) -> bool:
        return self.left <= 0

    def rows(self, want: int) -> int:
        """How many rows to read for up to ``want`` messages: one past what the budget
        is expected to take, or :data:`MIN_READ_BYTES` worth if that is more (a wrong
        guess costs another read, never a message)."""
        mean = self.mean
        if mean <= 0:
            return max(1, min(want, self.UNKNOWN_ROWS))
        by_budget = int(self.left / mean) + 1
        return max(1, min(want, max(by_budget, int(self.MIN_READ_BYTES / mean))))
