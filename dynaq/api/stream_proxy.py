"""Forwarding stream requests to the stream's authority node (see
:mod:`dynaq.streams.authority`), so every node, and a balancer in front of
them, serves every stream.

The request goes on as the client sent it (method, path, query, body, its
credentials, which the authority checks again), marked as forwarded so it is
never forwarded twice; the answer comes back as the authority gave it,
chunk by chunk (a live listen stays live through the hop). An authority that
cannot be reached is a 503 ``stream_unavailable``.
"""

from __future__ import annotations

import asyncio
import ssl
import weakref
from typing import Any

import aiohttp
from aiohttp import web

from dynaq.core.membership import Member
from dynaq.errors import StreamUnavailable
from dynaq.streams.authority import StreamAuthority

FORWARDED_HEADER = "X-Dynaq-Forwarded-By"
_REQUEST_HEADERS = (
    "Authorization",
    "Content-Type",
    "Content-Encoding",
    "Accept",
    "X-Publisher-Token",
)
_ANSWER_HEADERS = (
    "Content-Type",
    "X-Subscription-Id",
    "X-Stream-Size",
    "X-Stream-First",
    "Retry-After",
    "WWW-Authenticate",
)


class StreamForwarder:
    """The authority lookup and the HTTP client that forwards to it."""

    def __init__(self, authority: StreamAuthority, peer_ssl: ssl.SSLContext | None) -> None:
        self.authority = authority
        self._ssl: ssl.SSLContext | bool = peer_ssl if peer_ssl is not None else True
        self._session: aiohttp.ClientSession | None = None
        # Answers being relayed (weak: each goes once its request is done with it).
        self._relays: weakref.WeakSet[aiohttp.ClientResponse] = weakref.WeakSet()

    def stop_relays(self) -> None:
        """The node drains: cut every answer still being relayed (a listen follows for
        as long as its client stays, and the authority is not stopping), so the drain
        does not wait its timeout out; each client sees its answer broken, as when an
        authority goes away, and listens again through another node."""
        for up in list(self._relays):
            up.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            # No total timeout: a listen follows for as long as its client stays.
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=5.0)
            self._session = aiohttp.ClientSession(timeout=timeout, auto_decompress=False)
        return self._session

    async def target(
        self, request: web.Request, name: str, *, declaring: bool = False
    ) -> Member | None:
        """Where ``request`` for stream ``name`` is served: ``None`` here, or a member."""
        if FORWARDED_HEADER in request.headers:
            await self.authority.check_local(name, declaring=declaring)
            return None
        return await self.authority.route(name, declaring=declaring)

    async def list_elsewhere(self, request: web.Request) -> tuple[list[dict[str, Any]], list[str]]:
        """The streams every other live member serves (each entry names its node), and
        the members that did not answer within 5 s."""
        headers = {h: request.headers[h] for h in ("Authorization",) if h in request.headers}
        headers[FORWARDED_HEADER] = self.authority.me
        others = [m for m in self.authority.members() if m.name != self.authority.me]

        async def one(m: Member) -> list[dict[str, Any]]:
            async with self._client().get(
                m.base_url + "/v2/streams" + (f"?{qs}" if (qs := request.query_string) else ""),
                headers=headers,
                ssl=self._ssl,
                timeout=aiohttp.ClientTimeout(total=5.0),
            ) as r:
                if r.status != 200:
                    raise aiohttp.ClientResponseError(r.request_info, (), status=r.status)
                data = await r.json()
            return [{**e, "node": m.name} for e in data["streams"]]

        got = await asyncio.gather(*(one(m) for m in others), return_exceptions=True)
        found = [e for r in got if not isinstance(r, BaseException) for e in r]
        missing = [m.name for m, r in zip(others, got, strict=True) if isinstance(r, BaseException)]
        for r in got:
            if isinstance(r, BaseException) and not isinstance(
                r, aiohttp.ClientError | TimeoutError | ValueError | LookupError | TypeError
            ):
                raise r
        return found, missing

    async def forward(self, request: web.Request, to: Member, name: str) -> web.StreamResponse:
        """Send ``request`` to ``to`` and relay its answer."""
        headers = {h: request.headers[h] for h in _REQUEST_HEADERS if h in request.headers}
        headers[FORWARDED_HEADER] = self.authority.me
        body = await request.read()
        url = to.base_url + str(request.rel_url)
        try:
            async with self._client().request(
                request.method, url, headers=headers, data=body or None, ssl=self._ssl
            ) as up:
                self._relays.add(up)
                if up.status in (404, 503) or (request.method == "DELETE" and up.status < 300):
                    # Gone, moving, or deleted just now: read the record next time.
                    self.authority.stale(name)
                answer = {h: up.headers[h] for h in _ANSWER_HEADERS if h in up.headers}
                if "Content-Encoding" in up.headers:
                    answer["Content-Encoding"] = up.headers["Content-Encoding"]
                if request.method == "HEAD" or up.status in (204, 304):
                    return web.Response(status=up.status, headers=answer)
                resp = web.StreamResponse(status=up.status, headers=answer)
                if up.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    resp.enable_chunked_encoding()
                elif up.content_length is not None:
                    resp.content_length = up.content_length
                await resp.prepare(request)
                try:
                    async for data in up.content.iter_any():
                        await resp.write(data)
                except ConnectionError:
                    return resp  # the client went away: closing the upstream ends its listen
                except aiohttp.ClientError:
                    # The authority went away mid-answer: cut the client's connection
                    # too, so it sees a broken response, not a clean end.
                    if request.transport is not None:
                        request.transport.abort()
                    return resp
                await resp.write_eof()
                return resp
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            self.authority.stale(name)
            raise StreamUnavailable(
                f"stream {name!r} is served by node {to.name!r}, which did not answer "
                f"({type(exc).__name__}); retry"
            ) from None
