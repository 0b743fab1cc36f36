"""A message in a consumer's hand: :class:`Delivery`, and how it is settled.

A :class:`~dynaq.client.consumer.Consumer` yields each message it received as
a :class:`Delivery`. Settling one (:meth:`Delivery.ack`, :meth:`Delivery.release`,
or leaving ``async with delivery:``) happens at most once: the first settle
wins and later ones do nothing. Settling only hands the message back to its
consumer, which batches the deletes and releases and keeps heartbeating what is
still in hand (see :mod:`dynaq.client.consumer` for what that guarantees).
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol

from dynaq.client.types import ReceivedMessage


class Settler(Protocol):
    """Who a delivery is handed back to when settled (its consumer)."""

    def _settle(self, d: Delivery, *, ack: bool) -> None: ...


class Delivery:
    """A received message held by a consumer until it is settled."""

    def __init__(self, consumer: Settler, message: ReceivedMessage) -> None:
        self._consumer = consumer
        self.message = message
        self.settled = False
        self.lost_lease = False
        """The serving node no longer had it in flight at a heartbeat (it restarted,
        or the timeout passed): it may be served to another consumer too."""

    @property
    def id(self) -> int:
        return self.message.id

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def attributes(self) -> dict[str, str]:
        return self.message.attributes or {}

    @property
    def receive_count(self) -> int:
        return self.message.receive_count

    def ack(self) -> None:
        """Done: delete it (in the next batch). Settling twice does nothing."""
        if not self.settled:
            self.settled = True
            self._consumer._settle(self, ack=True)

    def release(self) -> None:
        """Not done: make it visible again now, for any consumer."""
        if not self.settled:
            self.settled = True
            self._consumer._settle(self, ack=False)

    async def __aenter__(self) -> Delivery:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is None:
            self.ack()
        else:
            self.release()

    def __repr__(self) -> str:
        return f"Delivery(id={self.id}, receive_count={self.receive_count})"
