"""The stream methods of :class:`dynaq.client.AsyncClient`: the same as
:mod:`dynaq.client._streams_sync`, as coroutines, and :meth:`AsyncStreams.follow`
as an async iterator.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, TypeVar

import aiohttp

from dynaq.client import ops_streams
from dynaq.client.ops import Op
from dynaq.client.policy import Endpoints, RetryPolicy
from dynaq.client.stream_types import (
    Appended,
    PublisherLease,
    StreamDeclared,
    StreamEntry,
    StreamInfo,
)
from dynaq.client.wire import parse
from dynaq.errors import ClientError, DynaqError, Unreachable

T = TypeVar("T")


class AsyncStreams:
    """Mixed into :class:`~dynaq.client.AsyncClient`, which provides the plumbing below."""

    _endpoints: Endpoints
    _retry: RetryPolicy
    _rng: random.Random
    scheme: str
    timeout_s: float

    async def _run(self, op: Op[T]) -> T:
        raise NotImplementedError  # the client's

    def _http(self) -> aiohttp.ClientSession:
        raise NotImplementedError  # the client's

    async def list_streams(self, *, hidden: bool = False) -> list[StreamInfo]:
        """The streams of the node that answers, with their sizes (no schemas);
        processors' backing streams (``_cues.*``) only when ``hidden``."""
        return await self._run(ops_streams.list_streams(hidden))

    async def declare_stream(
        self,
        stream: str,
        schema: Mapping[str, Any],
        order_key: str | None = None,
        *,
        retention: Mapping[str, float] | None = None,
    ) -> StreamDeclared:
        """Create ``stream`` with a JSON Schema for its entries (and the entry field
        that orders it), or extend its schema compatibly; the same schema again is
        a no-op. An incompatible schema is refused and changes nothing.
        ``retention`` (``max_bytes``, ``max_age_s``; 0: no limit) sets the stream's own
        limits (else the node's apply); the newest finalized segment always stays."""
        return await self._run(ops_streams.declare_stream(stream, schema, order_key, retention))

    async def describe_stream(self, stream: str) -> StreamInfo:
        """The stream's schema, order key and figures."""
        return await self._run(ops_streams.describe_stream(stream))

    async def delete_stream(self, stream: str) -> None:
        """Delete the stream and its files; its listeners are told to stop first."""
        await self._run(ops_streams.delete_stream(stream))

    async def stream_size(self, stream: str) -> int:
        """How many entries the stream holds (its next index)."""
        return await self._run(ops_streams.stream_size(stream))

    async def read_stream(self, stream: str, start: int, count: int) -> list[dict[str, Any]]:
        """Up to ``count`` entries from index ``start``, as ``{"index", "order", "entry"}``;
        answers at once with what is there, never waits for more."""
        return await self._run(ops_streams.read_stream(stream, start, count))

    async def append(
        self,
        stream: str,
        entries: Sequence[Any],
        *,
        token: int | None = None,
        expect_index: int | None = None,
    ) -> Appended:
        """Append ``entries`` (in one request: all are written and fsync'd, or none);
        ``token`` is the publisher lease's, required while a lease is held.
        With ``expect_index``, a conditional append: written only if the first
        entry gets that index, else :class:`~dynaq.errors.IndexTaken` (nothing
        written). Not resent once it may have arrived (it would append twice)."""
        return await self._run(ops_streams.append(stream, entries, token, expect_index))

    async def acquire_publisher(self, stream: str, ttl_s: float | None = None) -> PublisherLease:
        """Take the stream's exclusive publisher lease for ``ttl_s`` (the node's default
        when ``None``); :class:`~dynaq.errors.PublisherFenced` while another holds it."""
        return await self._run(ops_streams.acquire_publisher(stream, None, ttl_s))

    async def renew_publisher(
        self, stream: str, token: int, ttl_s: float | None = None
    ) -> PublisherLease:
        """Extend a lease held with ``token``; once it lapsed, this takes a new lease
        (a new token: appends with the old one are fenced)."""
        return await self._run(ops_streams.acquire_publisher(stream, token, ttl_s))

    async def release_publisher(self, stream: str, token: int) -> None:
        """Give the lease up now (unfenced appends are accepted again)."""
        await self._run(ops_streams.release_publisher(stream, token))

    async def read_range(
        self,
        stream: str,
        start: int | None = None,
        count: int = 1000,
        *,
        tail: int | None = None,
        since: int | None = None,
        until: int | None = None,
    ) -> list[StreamEntry]:
        """Up to ``count`` durable entries from index ``start`` (or the last ``tail``, or
        from order key ``since``; default the beginning), none with an order key above
        ``until``; answers at once with what is there."""
        return await self._run(ops_streams.read_range(stream, start, count, tail, since, until))

    def follow(
        self,
        stream: str,
        *,
        start: int | None = None,
        tail: int | None = None,
        since: int | None = None,
        count: int | None = None,
        until: int | None = None,
        idle_timeout_s: float | None = None,
    ) -> AsyncGenerator[StreamEntry, None]:
        """Entries from ``start`` (or ``tail``, ``since``; default the beginning), then
        each new one as it becomes durable, in index order, without gaps.

        Ends after ``count`` entries, before one whose order key is above ``until``,
        when the stream is deleted, or after ``idle_timeout_s`` with no entry (never,
        when ``None``). A dropped connection, a node restarting or a proxy's idle
        timeout is followed again from the entry after the last one yielded (none
        lost, none repeated), with backoff, for up to the retry policy's
        ``deadline_s``; then the error is raised. Closing the iterator (``aclose``) closes the
        connection (and the node's listener).
        """
        plan = ops_streams.FollowPlan(stream, start, tail, since, count, until)
        plan.path()  # bad arguments raise here, not at the first entry
        return self._follow(self._endpoints.current, plan, idle_timeout_s)

    async def _follow(
        self, addr: str, plan: ops_streams.FollowPlan, idle_timeout_s: float | None
    ) -> AsyncGenerator[StreamEntry, None]:
        failed_at: float | None = None
        retries = 0
        while True:
            listener = self._listen(addr, plan, idle_timeout_s)
            try:
                async for entry in listener:
                    plan.saw(entry)
                    yield entry
                return
            except DynaqError as exc:
                if plan.opened:  # it had been answering: a new failure, a new window
                    failed_at, retries, plan.opened = None, 0, False
                now = time.monotonic()
                failed_at = now if failed_at is None else failed_at
                p = self._retry
                if not exc.retriable or plan.gives_up(
                    retries, p.attempts, now - failed_at, p.deadline_s
                ):
                    raise
                if plan.complete:
                    return
                await asyncio.sleep(self._retry.delay_s(min(retries, 8), self._rng))
                retries += 1
            finally:
                await listener.aclose()  # its response closed now, not when collected

    async def _listen(
        self, addr: str, plan: ops_streams.FollowPlan, idle_timeout_s: float | None
    ) -> AsyncGenerator[StreamEntry, None]:
        path = plan.path()
        what = f"GET {path} at {addr}"
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.timeout_s, sock_read=idle_timeout_s
        )
        try:
            resp = await self._http().get(f"{self.scheme}://{addr}{path}", timeout=timeout)
        except aiohttp.ClientConnectorCertificateError as exc:
            raise ClientError(f"{what}: {exc}") from exc
        except aiohttp.ClientConnectorError as exc:
            raise Unreachable(f"{what}: {exc}", sent=False) from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Unreachable(f"{what}: {exc!r}", sent=True) from exc
        # The response is never handed back to the pool: it is a live stream, and
        # closing it is how the node learns that this listener has gone.
        try:
            if resp.status >= 300 or resp.status == 204:
                data = await resp.read()
                parse(resp.status, resp.headers.get("Content-Type", ""), data, what)
                return  # 204: nothing to send and nothing to wait for
            plan.opened = plan.ever_opened = True
            decoder = ops_streams.EntryDecoder()
            while True:
                try:
                    data = await resp.content.readany()
                except TimeoutError:
                    return  # idle for idle_timeout_s (aiohttp's read timeout is one)
                except aiohttp.ClientError as exc:
                    raise Unreachable(f"{what}: {exc!r}", sent=True) from exc
                if not data:
                    return  # the node ended it: a stop condition, or the stream was deleted
                for entry in decoder.feed(data):
                    yield entry
        finally:
            resp.close()
