"""The v1, v2 and transaction API suites again, on a node whose store is the session's Riak KV.

Every test of ``test_v1`` and ``test_v2`` is collected here a second time
(imported below); this module's ``node`` fixture overrides the LMDB one, so
each runs against an in-process node on fresh Riak buckets (``n_val`` 1: the
Riak node is alone), with the same manual clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dynaq.clock import ManualClock
from dynaq.node import Node
from dynaq.testing.servers.riak import RiakServer
from tests.api.test_v1 import *  # noqa: F403 - the suite, collected again on Riak
from tests.api.test_v2 import *  # noqa: F403 - the suite, collected again on Riak
from tests.api.test_v2_transactions import *  # noqa: F403 - the suite, collected again on Riak
from tests.fixtures.nodes import node_config
from tests.fixtures.riak import new_prefix

pytestmark = pytest.mark.slow


@pytest.fixture
async def node(tmp_path: Path, clock: ManualClock, riak: RiakServer) -> AsyncIterator[Node]:
    """An in-process node on Riak, on a free port, with a manual clock."""
    config = node_config(
        tmp_path,
        storage={"backend": "riak"},
        riak={"http": [riak.http], "pb": [riak.pb], "n_val": 1, "bucket_prefix": new_prefix()},
    )
    n = Node(config, clock=clock)
    await n.start()
    try:
        yield n
    finally:
        await n.stop()


async def test_the_node_here_stores_on_riak(node: Node) -> None:
    from dynaq.storage.riak import RiakStore

    assert isinstance(node.store, RiakStore)
    assert await node.store.get(b"c/nothing-here") is None
