"""The stream methods of :class:`dynaq.client.Client` (blocking); the asyncio twin is
:mod:`dynaq.client._streams_async`, and a test keeps the two in step.

Streams are node-local: see :mod:`dynaq.client.ops_streams` for why stream calls
belong on the node that holds the stream, and for the retry rules.
"""

from __future__ import annotations

import http.client
import random
import ssl
import time
from collections.abc import Generator, Mapping, Sequence
from typing import Any, TypeVar

from dynaq.client import ops_streams
from dynaq.client.ops import Op
from dynaq.client.policy import Endpoints, RetryPolicy, host_port
from dynaq.client.stream_types import (
    Appended,
    PublisherLease,
    StreamDeclared,
    StreamEntry,
    StreamInfo,
)
from dynaq.client.wire import MSGPACK, parse
from dynaq.errors import ClientError, DynaqError, Unreachable

T = TypeVar("T")
_READ = 65536


class SyncStreams:
    """Mixed into :class:`~dynaq.client.Client`, which provides the plumbing below."""

    _endpoints: Endpoints
    _token: str | None
    _tls: ssl.SSLContext | None
    _retry: RetryPolicy
    _rng: random.Random
    scheme: str
    timeout_s: float

    def _run(self, op: Op[T]) -> T:
        raise NotImplementedError  # the client's

    def list_streams(self, *, hidden: bool = False) -> list[StreamInfo]:
        """The streams of the node that answers, with their sizes (no schemas);
        processors' backing streams (``_cues.*``) only when ``hidden``."""
        return self._run(ops_streams.list_streams(hidden))

    def declare_stream(
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
        return self._run(ops_streams.declare_stream(stream, schema, order_key, retention))

    def describe_stream(self, stream: str) -> StreamInfo:
        """The stream's schema, order key and figures."""
        return self._run(ops_streams.describe_stream(stream))

    def delete_stream(self, stream: str) -> None:
        """Delete the stream and its files; its listeners are told to stop first."""
        self._run(ops_streams.delete_stream(stream))

    def stream_size(self, stream: str) -> int:
        """How many entries the stream holds (its next index)."""
        return self._run(ops_streams.stream_size(stream))

    def read_stream(self, stream: str, start: int, count: int) -> list[dict[str, Any]]:
        """Up to ``count`` entries from index ``start``, as ``{"index", "order", "entry"}``;
        answers at once with what is there, never waits for more."""
        return self._run(ops_streams.read_stream(stream, start, count))

    def append(
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
        return self._run(ops_streams.append(stream, entries, token, expect_index))

    def acquire_publisher(self, stream: str, ttl_s: float | None = None) -> PublisherLease:
        """Take the stream's exclusive publisher lease for ``ttl_s`` (the node's default
        when ``None``); :class:`~dynaq.errors.PublisherFenced` while another holds it."""
        return self._run(ops_streams.acquire_publisher(stream, None, ttl_s))

    def renew_publisher(
        self, stream: str, token: int, ttl_s: float | None = None
    ) -> PublisherLease:
        """Extend a lease held with ``token``; once it lapsed, this takes a new lease
        (a new token: appends with the old one are fenced)."""
        return self._run(ops_streams.acquire_publisher(stream, token, ttl_s))

    def release_publisher(self, stream: str, token: int) -> None:
        """Give the lease up now (unfenced appends are accepted again)."""
        self._run(ops_streams.release_publisher(stream, token))

    def read_range(
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
        return self._run(ops_streams.read_range(stream, start, count, tail, since, until))

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
    ) -> Generator[StreamEntry, None, None]:
        """Entries from ``start`` (or ``tail``, ``since``; default the beginning), then
        each new one as it becomes durable, in index order, without gaps.

        Ends after ``count`` entries, before one whose order key is above ``until``,
        when the stream is deleted, or after ``idle_timeout_s`` with no entry (never,
        when ``None``). A dropped connection, a node restarting or a proxy's idle
        timeout is followed again from the entry after the last one yielded (none
        lost, none repeated), with backoff, for up to the retry policy's
        ``deadline_s``; then the error is raised. Closing the generator closes the
        connection (and the node's listener).
        """
        plan = ops_streams.FollowPlan(stream, start, tail, since, count, until)
        plan.path()  # bad arguments raise here, not at the first entry
        return self._follow(self._endpoints.current, plan, idle_timeout_s)

    def _follow(
        self, addr: str, plan: ops_streams.FollowPlan, idle_timeout_s: float | None
    ) -> Generator[StreamEntry, None, None]:
        failed_at: float | None = None
        retries = 0
        while True:
            listener = self._listen(addr, plan, idle_timeout_s)
            try:
                for entry in listener:
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
                time.sleep(self._retry.delay_s(min(retries, 8), self._rng))
                retries += 1
            finally:
                listener.close()  # its connection closed now, not when collected

    def _listen(
        self, addr: str, plan: ops_streams.FollowPlan, idle_timeout_s: float | None
    ) -> Generator[StreamEntry, None, None]:
        path = plan.path()
        what = f"GET {path} at {addr}"
        host, port = host_port(self.scheme, addr)
        # Its own connection: the response stays open for as long as the caller reads.
        conn = (
            http.client.HTTPSConnection(host, port, timeout=self.timeout_s, context=self._tls)
            if self._tls is not None
            else http.client.HTTPConnection(host, port, timeout=self.timeout_s)
        )
        headers = {"Accept": MSGPACK}
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        try:
            try:
                conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
            except ssl.SSLCertVerificationError as exc:
                raise ClientError(f"{what}: {exc}") from exc
            except (http.client.HTTPException, OSError) as exc:
                raise Unreachable(f"{what}: {exc}", sent=conn.sock is not None) from exc
            if resp.status >= 300 or resp.status == 204:
                parse(resp.status, resp.getheader("Content-Type", ""), resp.read(), what)
                return  # 204: nothing to send and nothing to wait for
            plan.opened = plan.ever_opened = True
            if conn.sock is not None:
                conn.sock.settimeout(idle_timeout_s)
            decoder = ops_streams.EntryDecoder()
            while True:
                try:
                    data = resp.read1(_READ)
                except TimeoutError:
                    return  # idle for idle_timeout_s
                except (http.client.HTTPException, OSError) as exc:
                    raise Unreachable(f"{what}: {exc}", sent=True) from exc
                if not data:
                    return  # the node ended it: a stop condition, or the stream was deleted
                yield from decoder.feed(data)
        finally:
            conn.close()
