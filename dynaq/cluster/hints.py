"""Hints between nodes over HTTP: the sending side (the route is :mod:`dynaq.api.internal`).

"These messages were deleted here", "these lanes were written", and on a
graceful leave the in-flight handover. Messages are typed and encoded by
:mod:`dynaq.core.hints`.

Hints are best effort and batched: they collect for a few milliseconds and go
out as one msgpack POST per peer. A lost hint costs latency, never
correctness (the owner rescans idle partitions and re-checks expired
in-flight messages against the store).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import aiohttp

from dynaq.core.hints import HINTS_PATH, HandoverEntry, HintsMessage, QueueHints, encode_hints
from dynaq.core.ids import lane_of
from dynaq.core.membership import Member
from dynaq.tasks import cancel_and_wait

log = logging.getLogger(__name__)

_MSGPACK = "application/msgpack"


class HttpPeerHints:
    """Batches hints per peer and sends them from one background task."""

    def __init__(self, flush_after_s: float = 0.005, timeout_s: float = 2.0) -> None:
        self._flush_after_s = flush_after_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        # peer -> queue -> (deleted ids, lanes written, lane -> lowest group id written)
        self._pending: dict[str, dict[str, tuple[list[int], set[int], dict[int, int]]]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self.sent = 0

    def _slot(self, owner: Member, queue: str) -> tuple[list[int], set[int], dict[int, int]]:
        per_peer = self._pending.setdefault(owner.http_addr, {})
        slot = per_peer.get(queue)
        if slot is None:
            slot = per_peer[queue] = ([], set(), {})
        self._wake.set()
        return slot

    def deleted(self, owner: Member, queue: str, ids: list[int]) -> None:
        self._slot(owner, queue)[0].extend(ids)

    def enqueued(
        self, owner: Member, queue: str, lanes: list[int], rewind: Sequence[int] = ()
    ) -> None:
        _, written, lowest = self._slot(owner, queue)
        written.update(lanes)
        for i in rewind:
            lane = lane_of(i)
            lowest[lane] = min(i, lowest.get(lane, i))

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

    async def _send(
        self, addr: str, queues: dict[str, tuple[list[int], set[int], dict[int, int]]]
    ) -> None:
        assert self._session is not None
        message = HintsMessage(
            {
                q: QueueHints(tuple(d), tuple(sorted(lanes)), tuple(sorted(lowest.values())))
                for q, (d, lanes, lowest) in queues.items()
            }
        )
        try:
            async with self._session.post(
                f"http://{addr}{HINTS_PATH}",
                data=encode_hints(message),
                headers={"Content-Type": _MSGPACK},
            ) as resp:
                await resp.read()
            self.sent += 1
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.debug("hint to peer failed", extra={"peer": addr, "error": str(exc)})


async def hand_over(
    handover: dict[Member, dict[str, list[HandoverEntry]]], timeout_s: float = 3.0
) -> int:
    """Send a leaving node's in-flight messages to their next owners; return how many
    peers took them. Best effort within ``timeout_s``: a peer that misses it serves
    those messages again at once (duplicates, never loss)."""
    if not handover:
        return 0
    ok = 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as s:

        async def send(owner: Member, queues: dict[str, list[HandoverEntry]]) -> None:
            nonlocal ok
            try:
                async with s.post(
                    f"http://{owner.http_addr}{HINTS_PATH}",
                    data=encode_hints(HintsMessage({}, {q: tuple(e) for q, e in queues.items()})),
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
