"""Hints between nodes over HTTP: the sending side (the route is :mod:`dynaq.api.internal`).

"These messages were deleted here", "these lanes were written", and on a
graceful leave the in-flight handover. Messages are typed and encoded by
:mod:`dynaq.core.hints`.

Hints are best effort and batched: they collect for a few milliseconds and go
out as one msgpack POST per peer. A lost hint costs latency, never
correctness (the owner rescans idle partitions and re-checks expired
in-flight messages against the store).

Every POST is signed for the peer it goes to (:class:`~dynaq.core.peer_auth.PeerSigner`,
keyed from the cluster secret) and sent to the scheme the peer advertises: a
peer serving HTTPS is verified against ``ssl`` (the node's ``http.tls_ca``).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
import msgpack

from dynaq.core.hints import (
    HINTS_PATH,
    RECEIPT_DELETE_PATH,
    RECEIPT_HOLD_PATH,
    STATS_PATH,
    VISIBILITY_PATH,
    HandoverEntry,
    HintsMessage,
    QueueHints,
    encode_hints,
    handover_chunks,
)
from dynaq.core.ids import lane_of
from dynaq.core.membership import Member
from dynaq.core.messages import Message
from dynaq.core.peer_auth import PEER_AUTH_HEADER, PeerSigner
from dynaq.core.peer_receive import RECEIVE_PATH, WATCH_PATH, message_from_wire
from dynaq.errors import NotServing
from dynaq.tasks import cancel_and_wait

log = logging.getLogger(__name__)

_MSGPACK = "application/msgpack"


class HttpPeerHints:
    """Batches hints per peer and sends them from one background task."""

    def __init__(
        self,
        signer: PeerSigner,
        ssl_context: ssl.SSLContext | None = None,
        flush_after_s: float = 0.005,
        timeout_s: float = 2.0,
    ) -> None:
        self._signer = signer
        self._ssl = ssl_context
        self._flush_after_s = flush_after_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._timeout_s = timeout_s
        # peer -> queue -> (deleted ids, lanes written, lane -> lowest group id written)
        self._pending: dict[Member, dict[str, tuple[list[int], set[int], dict[int, int]]]] = {}
        # peer -> queues whose in-flight entries it must check against the store
        self._rechecks: dict[Member, set[str]] = {}
        # peer -> (this node's name, in-flight entries per queue) of lanes given to it
        self._releases: dict[Member, tuple[str, dict[str, list[HandoverEntry]]]] = {}
        self._take_back: Callable[[dict[str, list[HandoverEntry]]], None] | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._warned_at: dict[str, float] = {}
        self.sent = 0
        self.refused = 0

    def _slot(self, owner: Member, queue: str) -> tuple[list[int], set[int], dict[int, int]]:
        per_peer = self._pending.setdefault(owner, {})
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

    def recheck(self, owner: Member, queue: str) -> None:
        """Ask ``owner`` to check its in-flight entries of ``queue`` against the store
        (this node removed messages of it without knowing their ids: a purge)."""
        self._rechecks.setdefault(owner, set()).add(queue)
        self._wake.set()

    def released(self, owner: Member, me: str, queues: dict[str, list[HandoverEntry]]) -> None:
        """Send ``owner`` the in-flight entries of lanes it takes from this node, then
        the release marker it waits for (:mod:`dynaq.services.queues.slice_handoff`)."""
        _, pending = self._releases.get(owner, (me, {}))
        for queue, entries in queues.items():
            pending.setdefault(queue, []).extend(entries)
        self._releases[owner] = (me, pending)
        self._wake.set()

    def on_returned(self, take_back: Callable[[dict[str, list[HandoverEntry]]], None]) -> None:
        """Give ``take_back`` the entries of a release its owner refused with 503 (it is
        leaving too), did not answer, or that this node's stop cut short: they were
        not taken, or may not have been, and must not be lost."""
        self._take_back = take_back

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(timeout=self._timeout)
        self._task = asyncio.create_task(self._loop(), name="peer-hints")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self._pending or self._releases or self._rechecks:
            await self.flush()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def change_visibility(
        self, owner: Member, queue: str, ids: list[int], visibility_timeout_s: float
    ) -> list[int]:
        """Ask ``owner`` to extend or release ``ids`` (they are in its slice); return the
        ids it had in flight. :class:`NotServing` (503, retry) if it does not answer."""
        body = {"queue": queue, "ids": ids, "visibility_timeout_s": visibility_timeout_s}
        answer = await self._call(owner, VISIBILITY_PATH, body)
        return [int(i) for i in answer["changed"]]

    async def receive_from(
        self,
        owner: Member,
        queue: str,
        max_messages: int,
        visibility_timeout_s: float,
        per_group: int = 1,
        max_bytes: int | None = None,
    ) -> list[Message]:
        """Receive from ``owner``'s slice (no waiting; at most ``max_bytes`` of bodies
        where given); the messages stay in flight there."""
        body = {
            "queue": queue,
            "max_messages": max_messages,
            "visibility_timeout_s": visibility_timeout_s,
        }
        if per_group != 1:  # a peer of an earlier version reads no such member
            body["per_group"] = per_group
        if max_bytes is not None:
            body["max_bytes"] = max_bytes
        answer = await self._call(owner, RECEIVE_PATH, body)
        return [message_from_wire(m) for m in answer["messages"]]

    async def watch(self, owner: Member, queue: str, wait_s: float) -> bool:
        """Wait (up to ``wait_s``) until ``owner`` may have something visible in ``queue``."""
        body = {"queue": queue, "wait_s": wait_s}
        answer = await self._call(owner, WATCH_PATH, body, timeout_s=wait_s + self._timeout_s)
        return bool(answer["ready"])

    async def delete_receipts(
        self, owner: Member, queue: str, pairs: Sequence[tuple[int, int]]
    ) -> tuple[list[int], list[int]]:
        """Ask ``owner`` (which served them) to delete by receipt: (deleted, stale) ids."""
        body = {"queue": queue, "ids": [i for i, _ in pairs], "deliveries": [d for _, d in pairs]}
        answer = await self._call(owner, RECEIPT_DELETE_PATH, body)
        return [int(i) for i in answer["deleted"]], [int(i) for i in answer["stale"]]

    async def hold_receipts(
        self, owner: Member, queue: str, pairs: Sequence[tuple[int, int]], *, release: bool = False
    ) -> tuple[list[int], list[int]]:
        """Ask ``owner`` (which served them) to check and claim a transaction's receipts:
        the ids whose receipt is not current, and those another transaction claimed
        (none claimed then); ``release`` releases them instead."""
        body: dict[str, object] = {
            "queue": queue,
            "ids": [i for i, _ in pairs],
            "deliveries": [d for _, d in pairs],
        }
        if release:
            body["release"] = True
        answer = await self._call(owner, RECEIPT_HOLD_PATH, body)
        return [int(i) for i in answer["stale"]], [int(i) for i in answer["busy"]]

    async def change_visibility_receipts(
        self,
        owner: Member,
        queue: str,
        pairs: Sequence[tuple[int, int]],
        visibility_timeout_s: float,
    ) -> tuple[list[int], list[int]]:
        """Ask ``owner`` to change visibility by receipt: (changed, stale) ids."""
        body = {
            "queue": queue,
            "ids": [i for i, _ in pairs],
            "deliveries": [d for _, d in pairs],
            "visibility_timeout_s": visibility_timeout_s,
        }
        answer = await self._call(owner, VISIBILITY_PATH, body)
        return [int(i) for i in answer["changed"]], [int(i) for i in answer["stale"]]

    async def slice_stats(self, owner: Member, queue: str) -> dict[str, Any]:
        """``owner``'s figures for its slice of ``queue``; :class:`NotServing` if it does
        not answer."""
        return dict(await self._call(owner, STATS_PATH, {"queue": queue}))

    async def _call(
        self, peer: Member, path: str, message: dict[str, Any], timeout_s: float | None = None
    ) -> Any:
        """POST a signed msgpack request to ``peer`` and return its decoded answer."""
        body = bytes(msgpack.packb(message))
        headers = {
            "Content-Type": _MSGPACK,
            "Accept": _MSGPACK,
            PEER_AUTH_HEADER: self._signer.header("POST", peer.http_addr, path, body),
        }
        if self._session is None:
            raise NotServing("this node is not connected to its peers yet; retry")
        try:
            async with self._session.post(
                peer.base_url + path,
                data=body,
                headers=headers,
                ssl=self._ssl or True,
                timeout=self._timeout if timeout_s is None else aiohttp.ClientTimeout(timeout_s),
            ) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    raise NotServing(f"peer {peer.name} answered {resp.status}; retry")
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise NotServing(f"peer {peer.name} did not answer; retry") from exc
        return msgpack.unpackb(raw)

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(self._flush_after_s)
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        """Send everything pending now."""
        pending, self._pending = self._pending, {}
        releases, self._releases = self._releases, {}
        rechecks, self._rechecks = self._rechecks, {}
        if self._session is None:
            return
        await asyncio.gather(
            *(self._send(peer, queues) for peer, queues in pending.items()),
            *(self._send(peer, {}, tuple(sorted(qs))) for peer, qs in rechecks.items()),
            *(self._release(peer, me, queues) for peer, (me, queues) in releases.items()),
        )

    async def _release(self, peer: Member, me: str, queues: dict[str, list[HandoverEntry]]) -> None:
        """The entries in chunks, in order; the marker rides on the last one, so the
        peer serves only once it holds them all."""
        assert self._session is not None
        chunks = handover_chunks(queues) or [{}]
        taken = 0
        try:
            for n, chunk in enumerate(chunks):
                marker = me if n == len(chunks) - 1 else None
                body = encode_hints(HintsMessage({}, chunk, marker, handoff_from=me))
                status = await post_signed(self._session, self._signer, peer, body, self._ssl)
                if status != 200:
                    self._refused(peer, status)
                    if status == 503:  # leaving too (or not serving yet): not taken
                        self._give_back(chunks[n:])
                    return
                taken = n + 1
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.warning("lane handoff failed", extra={"peer": peer.name, "error": str(exc)})
            self._give_back(chunks[taken:])
        except asyncio.CancelledError:
            self._give_back(chunks[taken:])
            raise

    def _give_back(self, chunks: Sequence[dict[str, tuple[HandoverEntry, ...]]]) -> None:
        """Entries of a release that may not have reached its owner go back to this
        node (held twice at worst: both keep them invisible, neither serves early)."""
        queues: dict[str, list[HandoverEntry]] = {}
        for chunk in chunks:
            for queue, entries in chunk.items():
                queues.setdefault(queue, []).extend(entries)
        if queues and self._take_back is not None:
            self._take_back(queues)

    def _refused(self, peer: Member, status: int) -> None:
        """Say so once a minute per peer: a refusal (401: clocks apart, or secrets that
        differ) repeats on every batch, and must neither flood the log nor go unseen."""
        self.refused += 1
        now = time.monotonic()
        if now - self._warned_at.get(peer.name, -60.0) >= 60.0:
            self._warned_at[peer.name] = now
            log.warning("peer refused hints", extra={"peer": peer.name, "status": status})

    async def _send(
        self,
        peer: Member,
        queues: dict[str, tuple[list[int], set[int], dict[int, int]]],
        recheck: tuple[str, ...] = (),
    ) -> None:
        assert self._session is not None
        message = HintsMessage(
            {
                q: QueueHints(tuple(d), tuple(sorted(lanes)), tuple(sorted(lowest.values())))
                for q, (d, lanes, lowest) in queues.items()
            },
            recheck=recheck,
        )
        try:
            status = await post_signed(
                self._session, self._signer, peer, encode_hints(message), self._ssl
            )
            if status == 200:
                self.sent += 1
            else:
                self._refused(peer, status)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.debug("hint to peer failed", extra={"peer": peer.name, "error": str(exc)})


async def post_signed(
    session: aiohttp.ClientSession,
    signer: PeerSigner,
    peer: Member,
    body: bytes,
    ssl_context: ssl.SSLContext | None,
) -> int:
    """POST hints to ``peer``, signed for it; return the status.

    A refusal that tells the peer's time (its clock is apart from ours: a step,
    a VM restore) teaches the signer that offset, and the request is signed
    again and sent once more: hints keep flowing between nodes whose clocks
    disagree, which otherwise would leave every group waiting out visibility
    timeouts instead of moving on at each delete.
    """
    status, challenge = await _post_once(session, signer, peer, body, ssl_context)
    if status == 401 and signer.learn(peer.http_addr, challenge):
        log.warning(
            "peer clock apart from ours: signing with its time",
            extra={"peer": peer.name, "offset_s": signer.offset_ms(peer.http_addr) / 1000},
        )
        status, _ = await _post_once(session, signer, peer, body, ssl_context)
    return status


async def _post_once(
    session: aiohttp.ClientSession,
    signer: PeerSigner,
    peer: Member,
    body: bytes,
    ssl_context: ssl.SSLContext | None,
) -> tuple[int, str | None]:
    headers = {
        "Content-Type": _MSGPACK,
        PEER_AUTH_HEADER: signer.header("POST", peer.http_addr, HINTS_PATH, body),
    }
    async with session.post(
        peer.base_url + HINTS_PATH, data=body, headers=headers, ssl=ssl_context or True
    ) as resp:
        await resp.read()
        return resp.status, resp.headers.get("WWW-Authenticate")
