"""Topic history: what a topic with ``history`` publishes, kept in the stream
``topic.<name>`` (see :mod:`dynaq.services.topics`), and replayed from it.

Entries go to the stream's authority: appended here when this node is it,
else sent over the signed node-to-node route ``HISTORY_PATH``. The authority
stamps ``published_ms`` (the stream's order key) as the later of its clock and
the last entry's, so the order key never decreases whichever node published
and however their clocks differ, and ``since`` (a time) finds its place by
file names. Concurrent publishes to one topic share one append (and one
fsync): the first to take the stream's lock appends everything queued by then.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from dynaq.api.stream_proxy import StreamForwarder
from dynaq.clock import Clock
from dynaq.cluster.stream_link import HttpAuthorityLink
from dynaq.errors import SchemaConflict
from dynaq.services.queue_records import history_stream
from dynaq.streams import EntryType, StreamService
from dynaq.streams.replicas import CopySizes

HISTORY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["message_id", "body", "published_ms"],
    "properties": {
        "message_id": {"type": "string"},
        "body": {"type": "string", "description": "The message body, base64."},
        "attributes": {"type": "object", "additionalProperties": {"type": "string"}},
        "group": {"type": "string"},
        "dedup_id": {"type": "string"},
        "published_ms": {"type": "integer", "minimum": 0},
    },
}
ORDER_KEY = "published_ms"
HISTORY_SIGNATURE = EntryType.declare(HISTORY_SCHEMA, ORDER_KEY).signature
"""The signature a topic's history stream must carry to keep its history."""


class HistoryKeeper:
    """Appends topics' history entries where their stream is served."""

    def __init__(
        self,
        streams: StreamService,
        clock: Clock,
        forwarder: StreamForwarder | None = None,
        link: HttpAuthorityLink | None = None,
        copies: CopySizes | None = None,
        quorum_timeout_s: float = 5.0,
    ) -> None:
        self._streams = streams
        self._clock = clock
        self._forwarder = forwarder
        self._link = link
        self._copies = copies
        self._quorum_timeout_s = quorum_timeout_s
        self._locks: dict[str, asyncio.Lock] = {}
        self._queued: dict[str, list[tuple[list[dict[str, Any]], asyncio.Future[None]]]] = {}

    async def keep(self, topic: str, entries: list[dict[str, Any]]) -> None:
        """Append ``entries`` to ``topic``'s history (the stream is declared on first use)."""
        stream = history_stream(topic)
        if self._forwarder is not None:
            to = await self._forwarder.authority.route(stream, declaring=True)
            if to is not None:
                if self._link is None:
                    raise RuntimeError("a ring node without a peer link")  # node wiring
                await self._link.history(to, stream, entries)
                return
        await self.append_here(stream, entries)

    async def append_here(self, stream: str, entries: list[dict[str, Any]]) -> None:
        """Stamp and append ``entries`` on this node, the stream's authority."""
        if stream not in self._streams.names():
            await self._streams.declare(stream, HISTORY_SCHEMA, ORDER_KEY)
        elif self._streams.info(stream).signature != HISTORY_SIGNATURE:
            # Declared otherwise (before its name was reserved): publishing would fail.
            raise SchemaConflict(
                f"stream {stream!r} exists with a schema other than topic history's, so "
                f"history cannot be kept in it: DELETE /v2/streams/{stream} first"
            )
        if not entries:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queued.setdefault(stream, []).append((entries, future))
        async with self._locks.setdefault(stream, asyncio.Lock()):
            if not future.done():
                await self._drain(stream)
        await future

    async def _drain(self, stream: str) -> None:
        batch, self._queued[stream] = self._queued.get(stream, []), []
        try:
            stamp = max(self._clock.wall_ms(), self._streams.info(stream).last_order)
            flat = [{**e, ORDER_KEY: stamp} for entries, _ in batch for e in entries]
            staged = await self._streams.append(stream, flat, None)
            if self._copies is not None:
                end = staged.first_index + staged.count
                await self._copies.wait(stream, end, self._quorum_timeout_s)
        except BaseException as exc:
            for _, f in batch:
                if not f.done():
                    f.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for _, f in batch:
            if not f.done():
                f.set_result(None)


HISTORY = web.AppKey("topic_history", HistoryKeeper)
