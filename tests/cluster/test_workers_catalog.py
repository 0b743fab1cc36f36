"""A node of two workers looks like one node to queue and topic changes: what one
worker creates, deletes or subscribes, the other serves at once (they share the
store, so each lookup reads it), never a sync interval later. Before, a queue
deleted through one worker still took enqueues through the other (200 with an
id, then the messages were purged) for up to 30 s, and listings flapped."""

from __future__ import annotations

from pathlib import Path

import pytest

from dynaq.client import AsyncClient
from dynaq.errors import Conflict, QueueNotFound, TopicNotFound
from dynaq.testing import run_node
from tests.cluster.workers import wait_workers, worker_urls

pytestmark = pytest.mark.timeout(240)


async def test_what_one_worker_changes_the_other_serves_at_once(tmp_path: Path) -> None:
    async with run_node(directory=tmp_path, http_workers=2) as node:
        await wait_workers(node, 2)
        urls = await worker_urls(node)
        async with AsyncClient(urls["dynaq-1-w0"]) as a, AsyncClient(urls["dynaq-1-w1"]) as b:
            for round_ in range(3):
                q, t = f"q{round_}", f"t{round_}"
                await a.create_queue(q)
                assert q in await b.list_queues()
                await b.send(q, "through the other worker")
                await a.create_topic(t)
                assert t in await b.list_topics()
                await a.subscribe(t, q)
                assert await b.topic_queues(t) == [q]
                published = await b.publish(t, ["fan out"])
                assert list(published) == [q]

                await a.delete_queue(q)
                # The other worker refuses it at once: no acknowledged write into
                # a queue whose messages are being purged.
                with pytest.raises(QueueNotFound):
                    await b.send(q, "into a deleted queue")
                with pytest.raises(Conflict, match="deleted moments ago"):
                    await b.create_queue(q)  # not "already exists" from its cache
                assert q not in await b.list_queues()
                assert await b.topic_queues(t) == []
                assert await b.publish(t, ["to nobody"]) == {}

                await b.delete_topic(t)
                with pytest.raises(TopicNotFound):
                    await a.publish(t, ["into a deleted topic"])
                assert t not in await a.list_topics()
