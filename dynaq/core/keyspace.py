"""The keyspace: slices of lanes per live member, and partitions within a slice.

Pure functions over sorted member names. Every node computes the same slices
from the same view (Dynamiq's rule: live members sorted by name split the
keyspace evenly). Slices and partitions are whole lanes (see
:mod:`dynaq.core.ids`), so a lane is always served by exactly one partition of
exactly one node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dynaq.core.ids import LANE_SHIFT, LANES


@dataclass(frozen=True, slots=True)
class LaneRange:
    """Lanes ``[lo, hi)``."""

    lo: int
    hi: int

    @property
    def width(self) -> int:
        return self.hi - self.lo

    @property
    def bottom_id(self) -> int:
        """The first message id in the range."""
        return self.lo << LANE_SHIFT

    @property
    def top_id(self) -> int:
        """The last message id in the range (inclusive)."""
        return (self.hi << LANE_SHIFT) - 1

    def __contains__(self, lane: object) -> bool:
        return isinstance(lane, int) and self.lo <= lane < self.hi


FULL_RANGE = LaneRange(0, LANES)


def slices(members: Sequence[str]) -> dict[str, LaneRange]:
    """Split every lane among ``members`` (sorted by name), leaving no gap or overlap."""
    names = sorted(set(members))
    n = len(names)
    return {name: LaneRange(i * LANES // n, (i + 1) * LANES // n) for i, name in enumerate(names)}


def slice_of(members: Sequence[str], me: str) -> LaneRange | None:
    """This member's slice, or ``None`` if it is not among ``members``."""
    return slices(members).get(me)


def partition_ranges(slice_: LaneRange, count: int) -> list[LaneRange]:
    """Cut ``slice_`` into ``count`` contiguous partitions (at most one per lane)."""
    count = max(1, min(count, slice_.width))
    w = slice_.width
    return [
        LaneRange(slice_.lo + j * w // count, slice_.lo + (j + 1) * w // count)
        for j in range(count)
    ]
