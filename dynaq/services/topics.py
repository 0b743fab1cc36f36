"""Topics: publish once, every subscribed queue gets a copy.

A publish writes every copy in one storage batch, so it is atomic: either
every subscribed queue has the message or none has (the store's batch
guarantee). Group and dedup id travel with each copy; dedup is per queue.
Subscriptions to queues deleted since are skipped.
"""

from __future__ import annotations

from collections.abc import Sequence

from dynaq.core.messages import NewMessage
from dynaq.errors import QueueNotFound
from dynaq.services.catalog import Catalog, QueueInfo
from dynaq.services.queues.writes import PreparedWrite, Writer
from dynaq.storage.base import Op, Store


class TopicService:
    """Fanout of published messages to subscribed queues."""

    def __init__(self, store: Store, catalog: Catalog, writer: Writer) -> None:
        self._store = store
        self._catalog = catalog
        self._writer = writer

    async def publish(
        self, topic: str, messages: Sequence[NewMessage], *, with_ops: Sequence[Op] = ()
    ) -> dict[str, list[int]]:
        """Publish ``messages`` to every queue subscribed to ``topic``; return ids per queue.

        ``with_ops`` are written in the same store batch as the copies: all or
        none (a caller's marker that the publish happened).
        """
        info = await self._catalog.topic(topic)
        self._writer.check_batch(messages)
        targets: list[QueueInfo] = []
        for name in info.queues:
            try:
                targets.append(await self._catalog.queue(name))
            except QueueNotFound:
                continue

        async def write() -> list[PreparedWrite]:
            writes: list[PreparedWrite] = []
            async with self._writer.dedup_guard(targets, messages):
                for q in targets:
                    writes.append(await self._writer.prepare(q, messages))
                ops: list[Op] = [op for w in writes for op in w.ops]
                ops.extend(with_ops)
                if ops:
                    await self._store.write_batch(ops)
            for w in writes:
                self._writer.note_written(w)
            return writes

        writes = await self._writer.run_to_completion(write(), messages)
        return {w.info.name: w.ids for w in writes}
