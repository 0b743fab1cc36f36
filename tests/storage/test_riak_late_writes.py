"""A Riak write that timed out, then landed late, must not undo a newer write.

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
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest

from dynaq.errors import StorageUnavailable
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
    late = RiakStore(
        [proxy.address],
        bucket_prefix=prefix,
        n_val=1,
        request_timeout_s=1.0,
        journal_replay_every_s=0,
    )
    await late.open()
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
