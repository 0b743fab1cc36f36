"""The membership view the partition code reads: live members and their slices.

:class:`MembershipView` is pure state: it never awaits and never talks to the
network. The gossip agent (or, on a single node, nothing) replaces its members
and it notifies listeners so partitions are recomputed on every change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dynaq.core.keyspace import LaneRange, slices


@dataclass(frozen=True, slots=True)
class Member:
    """A live member of the ring: its name, HTTP address, and whether it serves HTTPS."""

    name: str
    http_addr: str
    scheme: str = "http"

    @property
    def base_url(self) -> str:
        """``http://host:port`` or ``https://host:port``: where peers send it requests."""
        return f"{self.scheme}://{self.http_addr}"


class MembershipView:
    """Sorted live members and this node's slice of the keyspace."""

    def __init__(self, me: Member) -> None:
        self.me = me
        self._members: dict[str, Member] = {me.name: me}
        self._slices = slices([me.name])
        self._listeners: list[Callable[[], None]] = []
        self.version = 0

    @property
    def members(self) -> list[Member]:
        """Live members, sorted by name."""
        return [self._members[n] for n in sorted(self._members)]

    @property
    def my_slice(self) -> LaneRange:
        return self._slices[self.me.name]

    def slices(self) -> Mapping[str, LaneRange]:
        return dict(self._slices)

    def owner_of_lane(self, lane: int) -> Member:
        """The live member that serves ``lane``."""
        for name, rng in self._slices.items():
            if lane in rng:
                return self._members[name]
        raise AssertionError(f"lane {lane} has no owner")

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every change of the live set."""
        self._listeners.append(listener)

    def replace(self, members: list[Member]) -> bool:
        """Set the live members (this node is always among them); return whether it changed."""
        new = {m.name: m for m in members}
        new[self.me.name] = self.me
        if new == self._members:
            return False
        self._members = new
        self._slices = slices(list(new))
        self.version += 1
        for listener in self._listeners:
            listener()
        return True
