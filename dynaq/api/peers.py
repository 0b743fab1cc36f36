"""Hints between nodes over HTTP: "these messages were deleted here", "these lanes were written".

Hints are best effort and batched: they collect for a few milliseconds and go
out as one msgpack POST per peer. A lost hint costs latency, never
correctness (the owner rescans idle partitions and re-checks expired
in-flight messages against the store).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import msgpack
from aiohttp import web

from dynaq.api.keys import QUEUES
from dynaq.core.membership import Member
from dynaq.tasks import cancel_and_wait

log = logging.getLogger(__name__)

HINTS_PATH = "/internal/v1/hints"
_MSGPACK = "application/msgpack"


class HttpPeerHints:
    """Batches hints per peer and sends them from one background task."""

    def __init__(self, flush_after_s: float = 0.005, timeout_s: float = 2.0) -> None:
        self._flush_after_s = flush_after_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._pending: dict[str, dict[str, tuple[list[int], set[int]]]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self.sent = 0

    def _slot(self, owner: Member, queue: str) -> tuple[list[int], set[int]]:
        per_peer = self._pending.setdefault(owner.http_addr, {})
        slot = per_peer.get(queue)
        if slot is None:
            slot = per_peer[queue] = ([], set())
        self._wake.set()
        return slot

    def deleted(self, owner: Member, queue: str, ids: list[int]) -> None:
        self._slot(owner, queue)[0].extend(ids)

    def enqueued(self, owner: Member, queue: str, lanes: list[int]) -> None:
        self._slot(owner, queue)[1].update(lanes)

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=self._timeout)
        self._task = asyncio.create_task(self._loop(), name="peer-hints")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self._pending:
            await self.flush()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(self._flush_after_s)
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        """Send everything pending now."""
        pending, self._pending = self._pending, {}
        if not pending or self._session is None:
            return
        await asyncio.gather(*(self._send(addr, queues) for addr, queues in pending.items()))

    async def _send(self, addr: str, queues: dict[str, tuple[list[int], set[int]]]) -> None:
        assert self._session is not None
        body = {q: {"deleted": d, "lanes": sorted(lanes)} for q, (d, lanes) in queues.items()}
        try:
            async with self._session.post(
                f"http://{addr}{HINTS_PATH}",
                data=msgpack.packb({"queues": body}),
                headers={"Content-Type": _MSGPACK},
            ) as resp:
                await resp.read()
            self.sent += 1
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.debug("hint to peer failed", extra={"peer": addr, "error": str(exc)})


async def hand_over(
    handover: dict[Member, dict[str, list[list[Any]]]], timeout_s: float = 3.0
) -> int:
    """Send a leaving node's in-flight messages to their next owners; return how many
    peers took them. Best effort within ``timeout_s``: a peer that misses it serves
    those messages again at once (duplicates, never loss)."""
    if not handover:
        return 0
    ok = 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as s:

        async def send(owner: Member, queues: dict[str, list[list[Any]]]) -> None:
            nonlocal ok
            try:
                async with s.post(
                    f"http://{owner.http_addr}{HINTS_PATH}",
                    data=msgpack.packb({"queues": {}, "handover": queues}),
                    headers={"Content-Type": _MSGPACK},
                ) as resp:
                    await resp.read()
                    ok += resp.status == 200
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                log.warning(
                    "in-flight handover failed", extra={"peer": owner.name, "error": str(exc)}
                )

        await asyncio.gather(*(send(o, q) for o, q in handover.items()))
    return ok


async def receive_hints(request: web.Request) -> web.Response:
    """Apply hints sent by a peer (internal route)."""
    try:
        data = msgpack.unpackb(await request.read(), strict_map_key=False)
        queues = data["queues"]
        parsed = [
            (str(q), [int(i) for i in h.get("deleted", ())], [int(x) for x in h.get("lanes", ())])
            for q, h in queues.items()
        ]
        handover = [
            (str(q), [(int(e[0]), float(e[1]), int(e[2]), e[3]) for e in entries])
            for q, entries in data.get("handover", {}).items()
        ]
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, msgpack.UnpackException):
        return web.json_response({"error": "malformed hints", "code": "invalid_input"}, status=422)
    service = request.app[QUEUES]
    for queue, deleted, lanes in parsed:
        service.apply_hints(queue, deleted, lanes)
    for queue, entries in handover:
        service.apply_handover(queue, entries)
    return web.json_response({"ok": True})
