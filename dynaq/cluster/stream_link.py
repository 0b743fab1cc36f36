"""A follower's HTTP link to a stream's authority (see :mod:`dynaq.streams.replicas`).

The three signed node-to-node routes of :mod:`dynaq.core.stream_copies`: the
declaration, the entries from an index on (a chunked response that stays open
and follows live), and the follower's report of the size it holds.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgpack

from dynaq.core.membership import Member
from dynaq.core.peer_auth import PEER_AUTH_HEADER, PeerSigner
from dynaq.core.stream_copies import (
    DECLARED_PATH,
    FOLLOW_PATH,
    HISTORY_PATH,
    REPORT_PATH,
    SIZE_PATH,
    Declared,
)
from dynaq.errors import DynaqError, InvalidInput, StreamNotFound, StreamUnavailable

_MSGPACK = "application/msgpack"


class HttpAuthorityLink:
    """:class:`~dynaq.streams.replicas.AuthorityLink` over signed HTTP."""

    def __init__(self, signer: PeerSigner, me: str, ssl_context: ssl.SSLContext | None) -> None:
        self._signer = signer
        self._me = me
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            # No total timeout: a follow stays open while the stream is quiet.
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=5.0, sock_read=None)
            self._session = aiohttp.ClientSession(timeout=timeout)
        return self._session

    def _headers(self, peer: Member, path: str, body: bytes) -> dict[str, str]:
        return {
            "Content-Type": _MSGPACK,
            "Accept": _MSGPACK,
            PEER_AUTH_HEADER: self._signer.header("POST", peer.http_addr, path, body),
        }

    async def _call(
        self, peer: Member, path: str, message: dict[str, Any], timeout_s: float = 5.0
    ) -> Any:
        body = bytes(msgpack.packb(message))
        try:
            async with self._client().post(
                peer.base_url + path,
                data=body,
                headers=self._headers(peer, path, body),
                ssl=self._ssl,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as r:
                raw = await r.read()
                _check(r.status, peer, message.get("stream"))
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise StreamUnavailable(f"authority {peer.name} did not answer: {exc!r}") from None
        return msgpack.unpackb(raw)

    async def declared(self, authority: Member, stream: str) -> Declared:
        got = await self._call(authority, DECLARED_PATH, {"stream": stream})
        try:
            return Declared(dict(got["schema"]), got["order_key"], str(got["signature"]))
        except (LookupError, TypeError, ValueError) as exc:
            raise InvalidInput(f"malformed declaration from {authority.name}: {exc}") from None

    async def sizes(self, members: list[Member], stream: str) -> dict[str, int]:
        """How much of ``stream`` each of ``members`` holds (those that answered and hold
        a copy): what a failover chooses from."""

        async def one(m: Member) -> int | None:
            try:
                got = await self._call(m, SIZE_PATH, {"stream": stream})
                return None if got.get("size") is None else int(got["size"])
            except (DynaqError, AttributeError, TypeError, ValueError):
                return None

        found = await asyncio.gather(*(one(m) for m in members))
        return {m.name: n for m, n in zip(members, found, strict=True) if n is not None}

    async def history(self, authority: Member, stream: str, entries: list[dict[str, Any]]) -> None:
        """Have ``authority`` append a topic's history entries (it waits for its quorum)."""
        await self._call(authority, HISTORY_PATH, {"stream": stream, "entries": entries}, 15.0)

    async def report(self, authority: Member, stream: str, size: int) -> None:
        await self._call(authority, REPORT_PATH, {"stream": stream, "node": self._me, "size": size})

    async def entries(
        self, authority: Member, stream: str, start: int
    ) -> AsyncIterator[tuple[int, list[Any]]]:
        """What arrives, chunk by chunk, as ``(first index, entries)``; ends when the
        authority ends the response (a deletion, its shutdown)."""
        body = bytes(msgpack.packb({"stream": stream, "start": start}))
        unpacker = msgpack.Unpacker(raw=False, max_buffer_size=256 * 1024 * 1024)
        expected = start
        try:
            async with self._client().post(
                authority.base_url + FOLLOW_PATH,
                data=body,
                headers=self._headers(authority, FOLLOW_PATH, body),
                ssl=self._ssl,
            ) as r:
                if r.status != 200:
                    await r.read()
                    _check(r.status, authority, stream)
                async for data in r.content.iter_any():
                    unpacker.feed(data)
                    entries: list[Any] = []
                    for item in unpacker:
                        if int(item["index"]) != expected + len(entries):
                            raise InvalidInput(
                                f"{authority.name} sent index {item['index']}, expected "
                                f"{expected + len(entries)}"
                            )
                        entries.append(item["entry"])
                    if entries:
                        yield expected, entries
                        expected += len(entries)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise StreamUnavailable(f"following {authority.name} broke off: {exc!r}") from None
        except (LookupError, TypeError, ValueError, msgpack.UnpackException) as exc:
            raise InvalidInput(f"malformed entries from {authority.name}: {exc}") from None


def _check(status: int, peer: Member, stream: Any) -> None:
    if status == 200:
        return
    if status == 404:
        raise StreamNotFound(f"stream {stream!r} is not on {peer.name}")
    raise StreamUnavailable(f"{peer.name} answered {status} for stream {stream!r}")
