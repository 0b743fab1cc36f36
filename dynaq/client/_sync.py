"""The blocking client: stdlib ``http.client`` and msgpack, nothing of the server.

It loads fast inside a Spark executor (no aiohttp). One :class:`Client` keeps
one keep-alive connection per node address; it is not thread-safe and not
picklable on purpose: build it where it is used.
"""

from __future__ import annotations

import http.client
import os
import random
import ssl
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from dynaq.client import ops, ops_queues, ops_tasks, ops_topics
from dynaq.client._batches_sync import SyncBatches
from dynaq.client._processors import SyncProcessors
from dynaq.client._streams_sync import SyncStreams
from dynaq.client.ops import Call, Op, may_retry, one_message
from dynaq.client.policy import Endpoints, RetryPolicy, host_port, moves_on, tls_context
from dynaq.client.types import (
    BrowsePage,
    Health,
    MessageLike,
    PartitionRange,
    PeekedMessage,
    QueueInfo,
    QueueSettings,
    ReceivedMessage,
    RingMember,
    TaskInfo,
    TxnDelete,
    TxnEnqueue,
    TxnResult,
)
from dynaq.client.wire import MSGPACK, parse_lazily
from dynaq.errors import ClientError, DynaqError, Unreachable

T = TypeVar("T")

IDLE_REUSE_S = 20.0
"""A kept-alive connection idle longer than this is replaced before use: nodes
close idle connections after ``http.keepalive_timeout_s`` (60 s), and a request
sent on one the node just closed would be lost without knowing if it arrived."""


class Client(SyncStreams, SyncBatches, SyncProcessors):
    """A dynaq client over one or more endpoints, blocking.

    ``endpoints``: ``"http://host:port"``, a comma-separated list, or a
    sequence; requests go to one, and move to the next when it cannot be
    reached or is not serving. ``token`` is sent as ``Authorization: Bearer``
    (never shown in errors or ``repr``). ``https://`` endpoints are verified
    against ``ca_file`` (or the system's CAs). Retries follow ``retry`` and
    the rules in :mod:`dynaq.client.ops`: an enqueue is sent again only if it
    never left, unless every message has a ``dedup_id``.

    Every error is a :class:`dynaq.errors.DynaqError`: what a node answered
    as its own class (``QueueNotFound``...), :class:`~dynaq.errors.Unreachable`
    when no endpoint answered.
    """

    def __init__(
        self,
        endpoints: str | Sequence[str],
        timeout_s: float = 60.0,
        *,
        token: str | None = None,
        ca_file: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._endpoints = Endpoints(endpoints)
        self.scheme = self._endpoints.scheme
        self.timeout_s = timeout_s
        self._token = token
        self._retry = retry or RetryPolicy()
        self._rng = random.Random()
        self._tls = tls_context(self.scheme, ca_file)
        self._conns: dict[str, tuple[http.client.HTTPConnection, float]] = {}
        self._closed = False

    @classmethod
    def from_env(cls, endpoints: str | None = None, **kwargs: Any) -> Client:
        """Endpoints from ``DYNAQ_ENDPOINT`` (default ``http://127.0.0.1:8081``) and
        the token from ``DYNAQ_TOKEN``, unless given."""
        endpoint = endpoints or os.environ.get("DYNAQ_ENDPOINT") or "http://127.0.0.1:8081"
        kwargs.setdefault("token", os.environ.get("DYNAQ_TOKEN") or None)
        return cls(endpoint, **kwargs)

    @property
    def addr(self) -> str:
        """The endpoint requests go to now (``host:port``)."""
        return self._endpoints.current

    def __repr__(self) -> str:
        return f"Client({self._endpoints!r})"  # never the token

    def close(self) -> None:
        """End the connections; the client takes no request after (``RuntimeError``)."""
        self._closed = True
        for conn, _ in self._conns.values():
            conn.close()
        self._conns.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # plumbing ----------------------------------------------------------------

    def _connection(self, addr: str, timeout_s: float) -> tuple[http.client.HTTPConnection, bool]:
        if self._closed:
            raise RuntimeError("this Client is closed")
        now = time.monotonic()
        kept = self._conns.pop(addr, None)
        if kept is not None and now - kept[1] < IDLE_REUSE_S:
            conn, reused = kept[0], True
        else:
            if kept is not None:
                kept[0].close()
            host, port = host_port(self.scheme, addr)
            if self._tls is not None:
                conn = http.client.HTTPSConnection(host, port, timeout=timeout_s, context=self._tls)
            else:
                conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
            reused = False
        conn.timeout = timeout_s
        if conn.sock is not None:
            conn.sock.settimeout(timeout_s)
        return conn, reused

    def _exchange(self, addr: str, call: Call[Any]) -> Any:
        headers = {"Accept": MSGPACK}
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        if call.content_type is not None:
            headers["Content-Type"] = call.content_type
        if call.headers:
            headers.update(call.headers)
        conn, reused = self._connection(addr, self.timeout_s + call.extra_timeout_s)
        sent = False
        try:
            conn.request(call.method, call.path, body=call.body, headers=headers)
            sent = True
            resp = conn.getresponse()
            data = resp.read()
        except ssl.SSLCertVerificationError as exc:
            conn.close()
            raise ClientError(f"{call.what} at {addr}: {exc}") from exc  # retrying cannot help
        except (ConnectionError, http.client.HTTPException, OSError) as exc:
            conn.close()
            # A request on a fresh connection that failed while being written
            # never reached a handler; one on a kept-alive connection may have.
            never_left = not sent and (not reused or isinstance(exc, ConnectionRefusedError))
            raise Unreachable(f"{call.what} at {addr}: {exc}", sent=not never_left) from exc
        self._conns[addr] = (conn, time.monotonic())
        return parse_lazily(
            resp.status, resp.getheader("Content-Type", ""), data, lambda: f"{call.what} at {addr}"
        )

    def _call(self, call: Call[T]) -> tuple[T, str]:
        started = time.monotonic()
        tried: set[str] = set()
        retries = 0
        while True:
            addr = call.node or self._endpoints.current
            tried.add(addr)
            try:
                return call.result(self._exchange(addr, call), addr), addr
            except DynaqError as exc:
                retries += 1
                p = self._retry
                if (
                    not may_retry(call, exc)
                    or retries >= p.attempts
                    or time.monotonic() - started > p.deadline_s
                ):
                    raise
                if call.node is None and moves_on(exc):
                    self._endpoints.failed(addr)
                if call.node is not None or self._endpoints.current in tried:
                    # Every endpoint failed since the last wait: back off.
                    tried.clear()
                    time.sleep(p.delay_s(retries - 1, self._rng))

    def _run_at(self, op: Op[T]) -> tuple[T, str]:
        results: list[Any] = []
        addr = ""
        for call in op.calls:
            result, addr = self._call(call)
            results.append(result)
        return op.combine(results), addr

    def _run(self, op: Op[T]) -> T:
        return self._run_at(op)[0]

    # cluster -----------------------------------------------------------------

    def health(self, addr: str | None = None) -> Health:
        """``GET /health`` of the endpoint (or of node ``addr``)."""
        return self._run(ops.health(addr))

    def ring(self) -> list[RingMember]:
        """The live members and their slices, as the endpoint sees them."""
        return self._run(ops.ring())

    def partitions(self, queue: str, addr: str | None = None) -> list[PartitionRange]:
        """The partitions node ``addr`` (default: the endpoint) serves ``queue`` from."""
        return self._run(ops.partitions(queue, addr))

    def snapshot_page(
        self,
        queue: str,
        from_id: int,
        to_id: int,
        limit: int = 5000,
        addr: str | None = None,
        encoding: str = "columns",
    ) -> dict[str, Any]:
        """One snapshot page (see :mod:`dynaq.services.snapshots`); never locks.
        ``encoding``: ``columns`` (decoded columns) or ``stored`` (the stored values,
        for a reader that decodes them itself)."""
        return self._run(ops.snapshot_page(queue, from_id, to_id, limit, addr, encoding))

    # queues ------------------------------------------------------------------

    def list_queues(self) -> list[str]:
        return self._run(ops_queues.list_queues())

    def create_queue(self, name: str, settings: QueueSettings | None = None) -> None:
        """Create ``name`` (``AlreadyExists`` if it does), then apply ``settings``."""
        self._run(ops_queues.create_queue(name, settings))

    def describe_queue(self, name: str, addr: str | None = None) -> QueueInfo:
        """Settings and figures (depth, in flight) as the endpoint counts them."""
        return self._run(ops_queues.describe_queue(name, addr))

    def configure_queue(self, name: str, settings: QueueSettings) -> None:
        """Change the settings that are not ``None``; the others stay."""
        self._run(ops_queues.configure_queue(name, settings))

    def delete_queue(self, name: str) -> None:
        """Delete the queue and purge its messages."""
        self._run(ops_queues.delete_queue(name))

    def purge_queue(self, name: str) -> TaskInfo:
        """Start purging ``name`` in the background; poll :meth:`task` for progress."""
        return self._run(ops_tasks.purge(name))

    def redrive(
        self, dlq: str, to_queue: str | None = None, max_per_s: int | None = None
    ) -> TaskInfo:
        """Start moving ``dlq``'s messages back to where they came from (or ``to_queue``),
        at most ``max_per_s`` a second; poll :meth:`task` for progress."""
        return self._run(ops_tasks.redrive(dlq, to_queue, max_per_s))

    def cancel_task(self, queue: str, task_id: str) -> TaskInfo:
        """Stop a running redrive of ``queue`` before its next page; it reads
        ``cancelling``, then ``cancelled`` (a finished task or a purge: 409)."""
        return self._run(ops_tasks.cancel_task(queue, task_id))

    def task(self, task_id: str) -> TaskInfo:
        """A purge or redrive task's progress (any node answers)."""
        return self._run(ops_tasks.task(task_id))

    def dead_letter_sources(self, dlq: str) -> list[str]:
        """The queues whose dead-letter queue ``dlq`` is."""
        return self._run(ops_tasks.dead_letter_sources(dlq))

    # messages ----------------------------------------------------------------

    def send(
        self,
        queue: str,
        body: bytes | str,
        *,
        attributes: Mapping[str, str] | None = None,
        group: str | None = None,
        dedup_id: str | None = None,
    ) -> int:
        """Enqueue one message; its id once it is durable."""
        message = one_message(body, attributes, group, dedup_id)
        return self._run(ops_queues.enqueue(queue, [message]))[0]

    def enqueue(self, queue: str, messages: Sequence[MessageLike]) -> list[int]:
        """Enqueue ``messages`` in requests of :data:`MAX_BATCH`; their ids, in order."""
        return self._run(ops_queues.enqueue(queue, messages))

    def receive(
        self,
        queue: str,
        max_messages: int = 10,
        visibility_timeout_s: float | None = None,
        addr: str | None = None,
        *,
        wait_time_s: float | None = None,
        max_per_group: int = 1,
    ) -> list[ReceivedMessage]:
        """Receive from ``addr``'s slice (default: the endpoint's); ``wait_time_s`` long-polls
        (0..20 s, else ``InvalidInput``; 0: no wait; ``None``: the queue's ``receive_wait_s``);
        up to ``max_per_group`` of one group, in order (held till each is deleted or visible)."""
        args = (visibility_timeout_s, wait_time_s, addr, max_per_group)
        op = ops_queues.receive(queue, max_messages, *args)
        return self._run(op)

    def delete(self, queue: str, ids: Sequence[int], addr: str | None = None) -> int:
        """Delete (acknowledge) messages; how many existed."""
        return self._run(ops_queues.delete(queue, ids, addr))

    def change_visibility(
        self, queue: str, ids: Sequence[int], visibility_timeout_s: float, addr: str | None = None
    ) -> list[int]:
        """Set in-flight messages' timeout from now (0 releases them); the ids changed.
        Send it to the node that served them (``ReceivedMessage.addr``)."""
        return self._run(ops_queues.change_visibility(queue, ids, visibility_timeout_s, addr))

    def release(self, queue: str, ids: Sequence[int], addr: str | None = None) -> int:
        """Make in-flight messages visible again now; how many were in flight."""
        return len(self.change_visibility(queue, ids, 0, addr))

    def peek(self, queue: str, ids: Sequence[int]) -> list[PeekedMessage]:
        """Read messages by id without taking them."""
        return self._run(ops_queues.peek(queue, ids))

    def browse(
        self, queue: str, from_id: int = 0, limit: int = 100, addr: str | None = None
    ) -> BrowsePage:
        """Stored messages from ``from_id`` on, in id order, without locking any."""
        return self._run(ops_queues.browse(queue, from_id, limit, addr))

    def transact(
        self, deletes: Sequence[TxnDelete] = (), enqueues: Sequence[TxnEnqueue] = ()
    ) -> TxnResult:
        """Delete received messages and enqueue outputs, all or nothing: see
        :func:`.ops_queues.transact`."""
        return self._run(ops_queues.transact(deletes, enqueues))

    # topics ------------------------------------------------------------------

    def list_topics(self) -> list[str]:
        return self._run(ops_topics.list_topics())

    def create_topic(self, name: str) -> None:
        self._run(ops_topics.create_topic(name))

    def topic_queues(self, name: str) -> list[str]:
        """The queues subscribed to ``name``."""
        return self._run(ops_topics.topic_queues(name))

    def topic_subscriptions(self, name: str) -> dict[str, dict[str, Any]]:
        """Each subscribed queue's options (``subscribe``'s arguments)."""
        return self._run(ops_topics.topic_subscriptions(name))

    def delete_topic(self, name: str) -> None:
        self._run(ops_topics.delete_topic(name))

    def subscribe(
        self,
        topic: str,
        queue: str,
        *,
        filter_policy: Mapping[str, Any] | None = None,
        filter_scope: str = "attributes",
        raw_delivery: bool = True,
    ) -> list[str]:
        """Subscribe (idempotent; options replace the old): see :func:`.ops_topics.subscribe`."""
        op = ops_topics.subscribe(topic, queue, filter_policy, filter_scope, raw_delivery)
        return self._run(op)

    def unsubscribe(self, topic: str, queue: str) -> list[str]:
        return self._run(ops_topics.unsubscribe(topic, queue))

    def publish(self, topic: str, messages: Sequence[MessageLike]) -> dict[str, list[int]]:
        """Publish to every subscribed queue (all copies or none); ids per queue."""
        return self._run(ops_topics.publish(topic, messages))
