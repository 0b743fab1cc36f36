"""Races between Riak writers of one key: waiting for them to be decided, and
writing the winner back over the siblings they leave.

Two writes that read the same version can both land (Riak's conditional check
is not atomic); the first came back alone and won, the later ones came back
with siblings and lost (:func:`riak_layout.won`). Which of several writes of
one lineage landed first the siblings do not say: only the losers know, and
they write the winner back. So a reader that meets such siblings waits for
that write-back (:meth:`RiakRaces.fetch_decided`) rather than guess, and a
write-back repeats the known winner over a late loser, never a newcomer. The
design and its limits are in ``docs/storage-riak.md``.
"""

from __future__ import annotations

import asyncio

from dynaq.storage import riak_layout as lay
from dynaq.storage.riak_http import RiakHttp, RiakObject

SETTLE_TRIES = 10
RACE_WAIT_S = 1.0
"""How long a reader waits for a race's losers to write the winner back before
it picks by the sibling rule's guess (:func:`riak_layout.current`)."""


class RiakRaces:
    """Fetches that wait for a race to be decided, and write-backs of its winner.

    ``messages_bucket`` is the one whose objects carry the ``id_int`` index (a
    write-back there must keep it)."""

    def __init__(self, db: RiakHttp, messages_bucket: str) -> None:
        self._db = db
        self._m = messages_bucket

    async def fetch_decided(self, bucket: str, name: str, mine: int = -1) -> RiakObject:
        """Fetch ``name``; while its value is undecided (see :func:`riak_layout.decided`;
        leaving out the sibling of version ``mine``), fetch again, for up to
        :data:`RACE_WAIT_S`: a race's losers write the winner back right after
        their own write, and only they know which write won."""
        delay, waited = 0.005, 0.0
        while True:
            obj = await self._db.fetch(bucket, name)
            live = [s for s in lay.siblings(obj.contents) if s.version != mine]
            if lay.decided(live) or waited >= RACE_WAIT_S:
                return obj
            await asyncio.sleep(delay)
            waited += delay
            delay = min(delay * 2, 0.2)

    async def write_back_winner(self, bucket: str, name: str, res: RiakObject, mine: int) -> None:
        """After losing a race (write ``mine`` came back with siblings of its lineage
        or deeper): replace the siblings by the winner, once the winner is known
        (a three-way race's last loser waits for the second's write-back)."""
        obj = res
        others = [s for s in lay.siblings(obj.contents) if s.version != mine]
        if not lay.decided(others):
            obj = await self.fetch_decided(bucket, name, mine)
            others = [s for s in lay.siblings(obj.contents) if s.version != mine]
        winner = lay.current(others)
        if winner is not None and len(lay.siblings(obj.contents)) > 1:
            await self.settle(bucket, name, obj, winner)

    async def settle(self, bucket: str, name: str, obj: RiakObject, keep: lay.Sibling) -> None:
        """Replace the siblings of ``obj`` by ``keep`` (one write that descends from all).

        ``keep`` is the known winner: a write of its lineage that lands meanwhile
        is a late loser, so the write-back is repeated with ``keep``; a deeper
        write (one that read the winner) needs nothing from here."""
        for _ in range(SETTLE_TRIES):
            res = await self._db.store(
                bucket,
                name,
                keep.value,
                vclock=obj.vclock,
                meta={lay.V: str(keep.version), lay.P: str(keep.parent)},
                indexes={lay.INDEX: lay.position(lay.from_msg(name))}
                if bucket == self._m
                else None,
                returnbody=True,
            )
            assert res is not None
            live = lay.siblings(res.contents)
            if lay.decided(live) or max(s.parent for s in live) > keep.parent:
                return
            obj = res
