"""The dynaq client library: :class:`Client` (blocking) and :class:`AsyncClient` (asyncio).

Both have the same methods, with the same arguments and typed results
(:mod:`dynaq.client.types`, :mod:`dynaq.client.stream_types`), over the whole API: v1/v2 queues and messages,
topics and subscriptions, batches, streams (with the publisher lease, and
:meth:`~Client.follow` to read one live), the ring. Both take several endpoints and
fail over between them, retry with backoff and jitter only what is safe to
send twice (:mod:`dynaq.client.ops`), send a bearer token, and raise only
:class:`dynaq.errors.DynaqError` subclasses (a node's answer as its own
class: ``except QueueNotFound`` works). ``DynaqError`` is re-exported here for
code that may import only the client (the Spark source).

:class:`AsyncClient` adds :meth:`~AsyncClient.consume` (a consumer that
long-polls every node, keeps visibility while handlers run and deletes in
batches) and :meth:`~AsyncClient.producer` (a producer that batches).

``import dynaq.client`` loads no aiohttp (Spark workers use :class:`Client`):
:class:`AsyncClient` and its helpers load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynaq.client._sync import Client
from dynaq.client.ops import MAX_BATCH
from dynaq.client.policy import RetryPolicy
from dynaq.client.stream_types import (
    Appended,
    PublisherLease,
    StreamDeclared,
    StreamEntry,
    StreamInfo,
)
from dynaq.client.types import (
    BatchCompletion,
    BatchInfo,
    BrowsePage,
    Health,
    ItemBlock,
    NewMessage,
    PartitionRange,
    PeekedMessage,
    QueueInfo,
    QueueSettings,
    ReceivedMessage,
    RingMember,
    TaskInfo,
    TxnDelete,
    TxnEnqueue,
    TxnOutput,
    TxnResult,
)
from dynaq.client.wire import MSGPACK
from dynaq.errors import DynaqError

__all__ = [
    "MAX_BATCH",
    "MSGPACK",
    "Appended",
    "AsyncClient",
    "BatchCompletion",
    "BatchInfo",
    "BrowsePage",
    "Client",
    "Consumer",
    "Delivery",
    "DynaqError",
    "Health",
    "ItemBlock",
    "NewMessage",
    "PartitionRange",
    "PeekedMessage",
    "Producer",
    "PublisherLease",
    "QueueInfo",
    "QueueSettings",
    "ReceivedMessage",
    "RetryPolicy",
    "RingMember",
    "StreamDeclared",
    "StreamEntry",
    "StreamInfo",
    "TaskInfo",
    "TxnDelete",
    "TxnEnqueue",
    "TxnOutput",
    "TxnResult",
]

if TYPE_CHECKING:
    from dynaq.client._async import AsyncClient
    from dynaq.client.consumer import Consumer, Delivery
    from dynaq.client.producer import Producer
else:
    _LAZY = {
        "AsyncClient": "dynaq.client._async",
        "Consumer": "dynaq.client.consumer",
        "Delivery": "dynaq.client.consumer",
        "Producer": "dynaq.client.producer",
    }

    def __getattr__(name: str) -> object:
        # PEP 562: aiohttp is imported only when the asyncio side is asked for.
        if name in _LAZY:
            import importlib

            return getattr(importlib.import_module(_LAZY[name]), name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})
