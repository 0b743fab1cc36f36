"""The asyncio client: the same surface as :class:`dynaq.client.Client`, on aiohttp.

Every method of :class:`~dynaq.client.Client` is here as a coroutine with the
same arguments and results (a test keeps the two in step), plus
:meth:`AsyncClient.consume` and :meth:`AsyncClient.producer`.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import aiohttp

from dynaq.client import ops, ops_queues, ops_tasks, ops_topics
from dynaq.client._batches_async import AsyncBatches
from dynaq.client._processors import AsyncProcessors
from dynaq.client._streams_async import AsyncStreams
from dynaq.client._sync import IDLE_REUSE_S
from dynaq.client.consumer import Consumer
from dynaq.client.ops import Call, Op, may_retry, one_message
from dynaq.client.policy import Endpoints, RetryPolicy, moves_on, tls_context
from dynaq.client.producer import Producer
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


class AsyncClient(AsyncStreams, AsyncBatches, AsyncProcessors):
    """A dynaq client over one or more endpoints, for asyncio.

    Arguments and guarantees as :class:`dynaq.client.Client`. Use it as an
    ``async with`` block (or call :meth:`close`): it holds an aiohttp session,
    created on first use inside the running loop.
    """

    def __init__(
        self,
        endpoints: str | Sequence[str],
        timeout_s: float = 60.0,
        *,
        token: str | None = None,
        ca_file: str | None = None,
        retry: RetryPolicy | None = None,
        connections: int = 100,
    ) -> None:
        self._endpoints = Endpoints(endpoints)
        self.scheme = self._endpoints.scheme
        self.timeout_s = timeout_s
        self._token = token
        self._retry = retry or RetryPolicy()
        self._rng = random.Random()
        self._tls = tls_context(self.scheme, ca_file)
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}

    @classmethod
    def from_env(cls, endpoints: str | None = None, **kwargs: Any) -> AsyncClient:
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
        return f"AsyncClient({self._endpoints!r})"  # never the token

    async def close(self) -> None:
        """End the connections; the client takes no request after (``RuntimeError``)."""
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # plumbing ----------------------------------------------------------------

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            if self._closed:  # a new session here would leak: nothing closes it
                raise RuntimeError("this AsyncClient is closed")
            headers = {"Accept": MSGPACK}
            if self._token is not None:
                headers["Authorization"] = f"Bearer {self._token}"
            connector = aiohttp.TCPConnector(
                limit=self._connections,
                keepalive_timeout=IDLE_REUSE_S,
                ssl=self._tls if self._tls is not None else True,
            )
            self._session = aiohttp.ClientSession(connector=connector, headers=headers)
        return self._session

    def _timeout(self, extra_s: float) -> aiohttp.ClientTimeout:
        # One object per distinct wait (few: 0 and the long polls' waits), not one a request.
        timeout = self._timeouts.get(extra_s)
        if timeout is None:
            timeout = self._timeouts[extra_s] = aiohttp.ClientTimeout(
                total=self.timeout_s + extra_s
            )
        return timeout

    async def _exchange(self, addr: str, call: Call[Any]) -> Any:
        headers = {} if call.content_type is None else {"Content-Type": call.content_type}
        if call.headers:
            headers.update(call.headers)
        url = f"{self.scheme}://{addr}{call.path}"
        timeout = self._timeout(call.extra_timeout_s)
        try:
            async with self._http().request(
                call.method, url, data=call.body, headers=headers, timeout=timeout
            ) as resp:
                data = await resp.read()
                status, ctype = resp.status, resp.headers.get("Content-Type", "")
        except aiohttp.ClientConnectorCertificateError as exc:
            raise ClientError(f"{call.what} at {addr}: {exc}") from exc  # retrying cannot help
        except aiohttp.ClientConnectorError as exc:
            # The connection was never made: the request never left.
            raise Unreachable(f"{call.what} at {addr}: {exc}", sent=False) from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Unreachable(f"{call.what} at {addr}: {exc!r}", sent=True) from exc
        return parse_lazily(status, ctype, data, lambda: f"{call.what} at {addr}")

    async def _call(self, call: Call[T]) -> tuple[T, str]:
        started = time.monotonic()
        tried: set[str] = set()
        retries = 0
        while True:
            addr = call.node or self._endpoints.current
            tried.add(addr)
            try:
                return call.result(await self._exchange(addr, call), addr), addr
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
                    tried.clear()
                    await asyncio.sleep(p.delay_s(retries - 1, self._rng))

    async def _run_at(self, op: Op[T]) -> tuple[T, str]:
        results: list[Any] = []
        addr = ""
        for call in op.calls:
            result, addr = await self._call(call)
            results.append(result)
        return op.combine(results), addr

    async def _run(self, op: Op[T]) -> T:
        if len(op.calls) == 1:  # nearly every op: one await fewer on the hot path
            return op.combine([(await self._call(op.calls[0]))[0]])
        return (await self._run_at(op))[0]

    # helpers -----------------------------------------------------------------

    def consume(
        self,
        queue: str,
        *,
        concurrency: int = 10,
        visibility_timeout_s: float = 30.0,
        wait_time_s: float = 10.0,
        batch_size: int = 10,
        stop_signals: Sequence[int] = (),
    ) -> Consumer:
        """A consumer of ``queue``: ``async for message in client.consume(...)``
        (see :class:`~dynaq.client.Consumer` for what it guarantees)."""
        return Consumer(
            self,
            queue,
            concurrency=concurrency,
            visibility_timeout_s=visibility_timeout_s,
            wait_time_s=wait_time_s,
            batch_size=batch_size,
            stop_signals=stop_signals,
        )

    def producer(
        self, queue: str | None = None, *, topic: str | None = None, linger_s: float = 0.005
    ) -> Producer:
        """A batching producer into ``queue`` (or ``topic``): ``await producer.send(body)``
        resolves once the message is durable (see :class:`~dynaq.client.Producer`)."""
        return Producer(self, queue=queue, topic=topic, linger_s=linger_s)

    # cluster -----------------------------------------------------------------

    async def health(self, addr: str | None = None) -> Health:
        """``GET /health`` of the endpoint (or of node ``addr``)."""
        return await self._run(ops.health(addr))

    async def ring(self) -> list[RingMember]:
        """The live members and their slices, as the endpoint sees them."""
        return await self._run(ops.ring())

    async def partitions(self, queue: str, addr: str | None = None) -> list[PartitionRange]:
        """The partitions node ``addr`` (default: the endpoint) serves ``queue`` from."""
        return await self._run(ops.partitions(queue, addr))

    async def snapshot_page(
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
        return await self._run(ops.snapshot_page(queue, from_id, to_id, limit, addr, encoding))

    # queues ------------------------------------------------------------------

    async def list_queues(self) -> list[str]:
        return await self._run(ops_queues.list_queues())

    async def create_queue(self, name: str, settings: QueueSettings | None = None) -> None:
        """Create ``name`` (``AlreadyExists`` if it does), then apply ``settings``."""
        await self._run(ops_queues.create_queue(name, settings))

    async def describe_queue(self, name: str, addr: str | None = None) -> QueueInfo:
        """Settings and figures (depth, in flight) as the endpoint counts them."""
        return await self._run(ops_queues.describe_queue(name, addr))

    async def configure_queue(self, name: str, settings: QueueSettings) -> None:
        """Change the settings that are not ``None``; the others stay."""
        await self._run(ops_queues.configure_queue(name, settings))

    async def delete_queue(self, name: str) -> None:
        """Delete the queue and purge its messages."""
        await self._run(ops_queues.delete_queue(name))

    async def purge_queue(self, name: str) -> TaskInfo:
        """Start purging ``name`` in the background; poll :meth:`task` for progress."""
        return await self._run(ops_tasks.purge(name))

    async def redrive(
        self, dlq: str, to_queue: str | None = None, max_per_s: int | None = None
    ) -> TaskInfo:
        """Start moving ``dlq``'s messages back to where they came from (or ``to_queue``),
        at most ``max_per_s`` a second; poll :meth:`task` for progress."""
        return await self._run(ops_tasks.redrive(dlq, to_queue, max_per_s))

    async def cancel_task(self, queue: str, task_id: str) -> TaskInfo:
        """Stop a running redrive of ``queue`` before its next page; it reads
        ``cancelling``, then ``cancelled`` (a finished task or a purge: 409)."""
        return await self._run(ops_tasks.cancel_task(queue, task_id))

    async def task(self, task_id: str) -> TaskInfo:
        """A purge or redrive task's progress (any node answers)."""
        return await self._run(ops_tasks.task(task_id))

    async def dead_letter_sources(self, dlq: str) -> list[str]:
        """The queues whose dead-letter queue ``dlq`` is."""
        return await self._run(ops_tasks.dead_letter_sources(dlq))

    # messages ----------------------------------------------------------------

    async def send(
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
        return (await self._run(ops_queues.enqueue(queue, [message])))[0]

    async def enqueue(self, queue: str, messages: Sequence[MessageLike]) -> list[int]:
        """Enqueue ``messages`` in requests of :data:`MAX_BATCH`; their ids, in order."""
        return await self._run(ops_queues.enqueue(queue, messages))

    async def receive(
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
        return await self._run(ops_queues.receive(queue, max_messages, *args))

    async def delete(self, queue: str, ids: Sequence[int], addr: str | None = None) -> int:
        """Delete (acknowledge) messages; how many existed."""
        return await self._run(ops_queues.delete(queue, ids, addr))

    async def change_visibility(
        self, queue: str, ids: Sequence[int], visibility_timeout_s: float, addr: str | None = None
    ) -> list[int]:
        """Set in-flight messages' timeout from now (0 releases them); the ids changed.
        Send it to the node that served them (``ReceivedMessage.addr``)."""
        return await self._run(ops_queues.change_visibility(queue, ids, visibility_timeout_s, addr))

    async def release(self, queue: str, ids: Sequence[int], addr: str | None = None) -> int:
        """Make in-flight messages visible again now; how many were in flight."""
        return len(await self.change_visibility(queue, ids, 0, addr))

    async def peek(self, queue: str, ids: Sequence[int]) -> list[PeekedMessage]:
        """Read messages by id without taking them."""
        return await self._run(ops_queues.peek(queue, ids))

    async def browse(
        self, queue: str, from_id: int = 0, limit: int = 100, addr: str | None = None
    ) -> BrowsePage:
        """Stored messages from ``from_id`` on, in id order, without locking any."""
        return await self._run(ops_queues.browse(queue, from_id, limit, addr))

    async def transact(
        self, deletes: Sequence[TxnDelete] = (), enqueues: Sequence[TxnEnqueue] = ()
    ) -> TxnResult:
        """Delete received messages and enqueue outputs, all or nothing: see
        :func:`.ops_queues.transact`."""
        return await self._run(ops_queues.transact(deletes, enqueues))

    # topics ------------------------------------------------------------------

    async def list_topics(self) -> list[str]:
        return await self._run(ops_topics.list_topics())

    async def create_topic(self, name: str) -> None:
        await self._run(ops_topics.create_topic(name))

    async def topic_queues(self, name: str) -> list[str]:
        """The queues subscribed to ``name``."""
        return await self._run(ops_topics.topic_queues(name))

    async def topic_subscriptions(self, name: str) -> dict[str, dict[str, Any]]:
        """Each subscribed queue's options (``subscribe``'s arguments)."""
        return await self._run(ops_topics.topic_subscriptions(name))

    async def delete_topic(self, name: str) -> None:
        await self._run(ops_topics.delete_topic(name))

    async def subscribe(
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
        return await self._run(op)

    async def unsubscribe(self, topic: str, queue: str) -> list[str]:
        return await self._run(ops_topics.unsubscribe(topic, queue))

    async def publish(self, topic: str, messages: Sequence[MessageLike]) -> dict[str, list[int]]:
        """Publish to every subscribed queue (all copies or none); ids per queue."""
        return await self._run(ops_topics.publish(topic, messages))
