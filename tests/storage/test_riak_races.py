"""Riak races the store must win: a write that timed out and landed late, and
readers that meet a race before its loser wrote the winner back.

**Late writes.**
A paused Riak (or a slow network) keeps a PUT in flight past its sender's
timeout; the sender reports the write as failed-or-unknown and moves on, and
another process writes the key meanwhile and is told it succeeded. When the
old PUT finally arrives it must change nothing. Before the store sent its
writes as "only if unchanged since read", the late PUT landed as a sibling of
the newer value with the same parent and an older version, and the sibling
rule picked it: an acknowledged write was lost (a Carlyle batch whose ack was
undone so it never completed, seen under the Riak SIGSTOP fault test).

The delay is real: the late store reaches Riak through a TCP proxy that keeps
its PUT back until the test releases it, after its request timed out.

**Undecided races.** Two writes checked at the same instant both land: the
first came back alone and was told it won; the second came back with the first
as a sibling, lost, and writes the first back. A reader in between sees both,
and which landed first the siblings do not say; before, it guessed (the older
version) and wrote its guess back, undoing the winner's acknowledged write.
Such siblings are made here with the store's own wire client, as the racing
process would leave them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest

from dynaq.errors import StorageUnavailable
from dynaq.storage import riak_layout as lay
from dynaq.storage.riak import RiakStore
from dynaq.testing.servers.riak import RiakServer
from tests.fixtures.late_requests import LateRequests
from tests.fixtures.riak import new_prefix, open_riak_store


@dataclass
class Stores:
    late: RiakStore
    """Writes through the proxy, with a 1 s request timeout."""
    now: RiakStore
    """Another process's store, straight to Riak."""
    proxy: LateRequests


@pytest.fixture
async def s(riak: RiakServer) -> AsyncIterator[Stores]:
    """A late store and a prompt one on the same fresh buckets."""
    proxy = LateRequests(riak.http)
    await proxy.start()
    prefix = new_prefix()
    now = await open_riak_store(riak, prefix)
    late = await open_riak_store(
        riak, prefix, http=proxy.address, request_timeout_s=1.0, journal_replay_every_s=0
    )
    try:
        yield Stores(late, now, proxy)
    finally:
        await late.close()
        await now.close()
        await proxy.close()


async def _late_then_newer(
    s: Stores,
    late_write: Callable[[], Awaitable[object]],
    newer_write: Callable[[], Awaitable[int | None]],
) -> None:
    """``late_write`` times out in flight; ``newer_write`` succeeds; then the late
    request reaches Riak."""
    s.proxy.hold("PUT")
    with pytest.raises(StorageUnavailable):
        await late_write()
    assert s.proxy.held == 1
    assert await newer_write() is not None
    await s.proxy.release()


async def test_a_late_conditional_write_does_not_undo_a_newer_one(s: Stores) -> None:
    base = await s.now.put(b"c/hdr", b"base")
    await _late_then_newer(
        s,
        lambda: s.late.put_if_version(b"c/hdr", b"late", base),
        lambda: s.now.put_if_version(b"c/hdr", b"newer", base),
    )
    for store in (s.now, s.late):
        item = await store.get(b"c/hdr")
        assert item is not None and item.value == b"newer"
    # The lineage goes on from the newer value.
    item = await s.now.get(b"c/hdr")
    assert item is not None
    assert await s.late.put_if_version(b"c/hdr", b"next", item.version) is not None
    after = await s.now.get(b"c/hdr")
    assert after is not None and after.value == b"next"


async def test_a_late_plain_write_does_not_undo_a_newer_one(s: Stores) -> None:
    await s.now.put(b"c/cfg", b"base")
    await _late_then_newer(
        s, lambda: s.late.put(b"c/cfg", b"late"), lambda: s.now.put(b"c/cfg", b"newer")
    )
    item = await s.now.get(b"c/cfg")
    assert item is not None and item.value == b"newer"


async def test_a_late_create_does_not_replace_the_first_one(s: Stores) -> None:
    await _late_then_newer(
        s,
        lambda: s.late.put_if_absent(b"c/once", b"late"),
        lambda: s.now.put_if_absent(b"c/once", b"first"),
    )
    item = await s.now.get(b"c/once")
    assert item is not None and item.value == b"first"


async def test_a_late_write_does_not_bring_back_a_deleted_key(s: Stores) -> None:
    base = await s.now.put(b"c/gone", b"base")

    async def delete() -> int | None:
        return 1 if await s.now.delete(b"c/gone") else None

    await _late_then_newer(s, lambda: s.late.put_if_version(b"c/gone", b"late", base), delete)
    assert await s.now.get(b"c/gone") is None
    assert await s.now.list_keys(b"c/", 10) == []


async def _race_left_undecided(store: RiakStore, key: bytes) -> tuple[int, int, int]:
    """Leave ``key`` as two racing writes from the same version leave it before the
    loser writes the winner back: siblings of one lineage. The winner (landed first)
    has the *newer* version, so the old guess (oldest version) would pick the loser.
    Returns the versions (base, winner, loser)."""
    base = await store.put(key, b"base")
    db, name = store._db, lay.kv_name(key)
    seen = await db.fetch(store._kv, name)
    loser_v, winner_v = base + (1 << 10), base + (2 << 10)
    for value, v in ((b"winner", winner_v), (b"loser", loser_v)):
        await db.store(
            store._kv, name, value, vclock=seen.vclock, meta={lay.V: str(v), lay.P: str(base)}
        )
    got = await db.fetch(store._kv, name)
    assert sorted(c.value for c in got.live) == [b"loser", b"winner"]
    return base, winner_v, loser_v


async def test_a_reader_waits_for_the_loser_to_write_the_winner_back(s: Stores) -> None:
    base, winner, _ = await _race_left_undecided(s.now, b"c/raced")

    async def loser_writes_back() -> None:
        await asyncio.sleep(0.3)
        db, name = s.late._db, lay.kv_name(b"c/raced")
        obj = await db.fetch(s.late._kv, name)
        await db.store(
            s.late._kv,
            name,
            b"winner",
            vclock=obj.vclock,
            meta={lay.V: str(winner), lay.P: str(base)},
        )

    t0 = time.monotonic()
    item, _ = await asyncio.gather(s.now.get(b"c/raced"), loser_writes_back())
    assert item is not None and item.value == b"winner"
    assert time.monotonic() - t0 >= 0.3  # it waited rather than guess


async def test_a_race_nobody_settles_is_decided_once_for_every_reader(s: Stores) -> None:
    _, winner, loser = await _race_left_undecided(s.now, b"c/orphan")
    item = await s.now.get(b"c/orphan")  # waits, then guesses and writes the guess back
    assert item is not None and item.version in (winner, loser)
    left = await s.now._db.fetch(s.now._kv, lay.kv_name(b"c/orphan"))
    assert len(left.live) == 1  # the guess was written back: every reader keeps it
    assert await s.late.get(b"c/orphan") == item
    assert await s.late.put_if_version(b"c/orphan", b"next", item.version) is not None
