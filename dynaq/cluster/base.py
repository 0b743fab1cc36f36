"""dynaq's membership interface, and the single-node ring.

A :class:`Membership` keeps a :class:`~dynaq.core.membership.MembershipView`
equal to the live ring. It owns whatever network agent that takes; the view
stays pure, and the partition code only ever reads the view.
"""

from __future__ import annotations

import abc

from dynaq.core.membership import MembershipView


class Membership(abc.ABC):
    """Keeps ``view`` equal to the live members of the ring.

    Guarantees: after :meth:`start` returns, ``view`` holds every member this
    node could reach through its seeds, and it is replaced (so slices are
    recomputed) on every later join, death or departure. :meth:`stop` tells
    the other members this node is leaving, so they take over its slice at
    once instead of after failure detection; it is safe to call twice.
    """

    def __init__(self, view: MembershipView) -> None:
        self.view = view

    @abc.abstractmethod
    async def start(self) -> None:
        """Join the ring, announcing ``view.me`` (name and HTTP address)."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Leave the ring gracefully and release the network agent."""

    def live_names(self) -> set[str]:
        """Names of the members this node considers live (itself included)."""
        return {m.name for m in self.view.members}


class StaticMembership(Membership):
    """A ring of one: this node serves every slice. Nothing runs."""

    async def start(self) -> None:
        self.view.replace([self.view.me])

    async def stop(self) -> None:
        return None
