"""Message ids: 63-bit integers laid out so that writes append.

Dynamiq drew ids at random; measured here, random keys cut durable LMDB
throughput ~10x because every message dirties its own page. dynaq's ids are
positions in the keyspace chosen so that concurrent writes land next to each
other and each lane of a queue fills oldest-first::

    bit 62 ........ 53 52 ..................... 13 12 .... 5 4 .... 0
        lane (10 bits)   wall ms since 2025 (40)    seq (8)   writer (5)

* ``lane`` places the message in the keyspace: node slices and queue
  partitions are ranges of lanes. A writer keeps appending to one lane for a
  while and then moves to another at random, so messages spread evenly over
  every slice but each commit touches few pages.
* ``wall ms`` + ``seq`` form a hybrid logical clock per lane: strictly
  increasing even when the wall clock stalls or more than 256 messages land in
  one millisecond (the clock then runs ahead briefly). It gives oldest-first
  order within a lane and lasts until 2059.
* ``writer`` makes ids from different nodes distinct without coordination;
  each node of a cluster holds its own writer slot (0..31).
"""

from __future__ import annotations

import random
import zlib

from dynaq.clock import Clock
from dynaq.errors import IdClockStalled, SlotLost
from dynaq.storage.base import ID_EPOCH_MS, ID_TIME_SHIFT
from dynaq.storage.base import LANE_BITS as LANE_BITS
from dynaq.storage.base import LANE_SHIFT as LANE_SHIFT

LANES = 1 << LANE_BITS
CLOCK_SHIFT = 5
SEQ_BITS = 8
WRITER_BITS = 5
MAX_WRITERS = 1 << WRITER_BITS
MAX_ID = (1 << 63) - 1
EPOCH_MS = ID_EPOCH_MS
_CLOCK_MASK = (1 << (LANE_SHIFT - CLOCK_SHIFT)) - 1
_ID_STEP = 1 << CLOCK_SHIFT
if CLOCK_SHIFT + SEQ_BITS != ID_TIME_SHIFT:  # pragma: no cover - declared in storage.base
    raise ImportError("id time layout disagrees with dynaq.storage.base")


def lane_of(message_id: int) -> int:
    """The lane (keyspace position, 0..1023) of an id."""
    return message_id >> LANE_SHIFT


def lane_start(lane: int) -> int:
    """The smallest id in ``lane``."""
    return lane << LANE_SHIFT


def enqueued_ms(message_id: int) -> int:
    """Approximate Unix time in ms when the id was drawn (the lane's hybrid clock)."""
    return ((message_id >> (CLOCK_SHIFT + SEQ_BITS)) & ((1 << 40) - 1)) + EPOCH_MS


def first_id_at(lane: int, wall_ms: int) -> int:
    """The smallest id of ``lane`` drawn at or after Unix time ``wall_ms``: every id
    of the lane below it was drawn earlier (the inverse of :func:`enqueued_ms`)."""
    units = min(max(0, wall_ms - EPOCH_MS), (1 << 40) - 1)
    return lane_start(lane) | (units << (CLOCK_SHIFT + SEQ_BITS))


def group_lane(group: str) -> int:
    """The lane every message of ``group`` goes to, so one partition of one node serves it."""
    return zlib.crc32(group.encode()) % LANES


def is_valid_id(value: int) -> bool:
    """Whether ``value`` is in [0, 2^63)."""
    return 0 <= value <= MAX_ID


class IdGenerator:
    """Draws append-friendly ids for one writer.

    Not thread-safe: call it from the event loop only. ``stride`` is how many
    ids a writer takes from one lane before hopping to another at random.
    """

    def __init__(
        self,
        clock: Clock,
        writer: int = 0,
        *,
        stride: int = 1024,
        rng: random.Random | None = None,
    ) -> None:
        if not 0 <= writer < MAX_WRITERS:
            raise ValueError(f"writer slot must be in 0..{MAX_WRITERS - 1}")
        self._clock = clock
        self._writer = writer
        self._stride = stride
        self._rng = rng or random.Random()
        self._last: dict[int, int] = {}
        self._floor = 0
        self._ceiling: int | None = None
        self._revoked = False
        self._lane = self._rng.randrange(LANES)
        self._left_in_lane = stride

    @property
    def writer(self) -> int:
        return self._writer

    def next_lane(self, count: int) -> int:
        """The lane the next ``count`` ungrouped messages should go to."""
        if self._left_in_lane < count:
            self._lane = self._rng.randrange(LANES)
            self._left_in_lane = self._stride
        self._left_in_lane -= count
        return self._lane

    def observe(self, lane: int, message_id: int) -> None:
        """Continue ``lane`` after ``message_id``, an id any writer drew there.

        The next id this generator draws in the lane is larger, whatever the
        clocks say: a hybrid logical clock across writers. A message group
        lives in one lane and is served in id order, so a writer observes the
        lane's newest id before it draws a group's ids: a message sent after
        another was acknowledged then sorts after it even when the two went
        through nodes whose clocks disagree.
        """
        units = (message_id >> CLOCK_SHIFT) & _CLOCK_MASK
        if units > self._last.get(lane, -1):
            self._last[lane] = units

    def set_bounds(self, floor_ms: int, ceiling_ms: int | None) -> None:
        """Issue no id below ``floor_ms`` or above ``ceiling_ms`` (wall ms).

        The floor is the high-water mark persisted by this writer slot's last
        holder, so a node restarted with its clock stepped back never draws an
        id it drew before (message writes overwrite). The ceiling is what has
        been persisted since: id time waits there (ids stop only once 256 per
        lane have been drawn in that millisecond) rather than outrun what a
        restart would know.
        """
        self._floor = max(self._floor, self._units(floor_ms))
        self._ceiling = None if ceiling_ms is None else self._units(ceiling_ms) | 0xFF

    def high_water_ms(self) -> int:
        """The wall ms of the newest id issued (the clock's own reading if none is newer)."""
        newest = max(self._last.values(), default=0)
        return max(self._clock.wall_ms(), EPOCH_MS + (max(newest, self._floor) >> SEQ_BITS))

    @staticmethod
    def _units(wall_ms: int) -> int:
        return (max(0, wall_ms - EPOCH_MS) << SEQ_BITS) & _CLOCK_MASK

    def revoke(self) -> None:
        """This writer's slot was lost: every further :meth:`allocate` raises :class:`SlotLost`."""
        self._revoked = True

    def _first(self, lane: int) -> int:
        now = ((self._clock.wall_ms() - EPOCH_MS) << SEQ_BITS) & _CLOCK_MASK
        if self._ceiling is not None and now > self._ceiling:
            # The wall clock leapt past the persisted mark (a step forward):
            # id time waits at the mark until it is refreshed, rather than fail.
            now = self._ceiling & ~0xFF
        return max(self._last.get(lane, -1) + 1, now, self._floor)

    def allocate(self, lane: int, count: int) -> range:
        """Reserve ``count`` consecutive ids in ``lane``, ascending."""
        if self._revoked:
            raise SlotLost(f"writer slot {self._writer} was taken by another node: no more ids")
        first = self._first(lane)
        last = first + count - 1
        if last > _CLOCK_MASK:
            raise OverflowError("id clock exhausted for this lane")
        if self._ceiling is not None and last > self._ceiling:
            raise IdClockStalled(
                "the id clock is ahead of its persisted high-water mark; retry shortly"
            )
        self._last[lane] = last
        base = (lane << LANE_SHIFT) | (first << CLOCK_SHIFT) | self._writer
        return range(base, base + count * _ID_STEP, _ID_STEP)
