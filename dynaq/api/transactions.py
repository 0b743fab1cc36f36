"""``POST /v2/transactions``: delete received messages and enqueue outputs, all or nothing.

JSON or msgpack, as the rest of v2 (ids are decimal strings in JSON, integers
in msgpack). The guarantees are :mod:`dynaq.services.queues.transactions`'s;
this handler only parses, checks permissions (``write`` on every queue named),
calls the service and shapes the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from dynaq.api.auth import require, require_batch_tags
from dynaq.api.codec import read_body, respond, sends_msgpack, wants_msgpack
from dynaq.api.keys import CATALOG, QUEUES
from dynaq.api.message_params import MESSAGE_MEMBERS, new_message, refuse_unknown
from dynaq.api.params import body_object
from dynaq.core.access import WRITE
from dynaq.core.receipts import decode_receipt
from dynaq.errors import InvalidInput
from dynaq.services.catalog import QueueInfo
from dynaq.services.queue_records import check_name
from dynaq.services.queues import TxnDelete, TxnEnqueue

TRANSACTIONS_PATH = "/v2/transactions"
_MEMBERS = ("delete", "enqueue")
_DELETE_MEMBERS = ("queue", "receipt")
_ENQUEUE_MEMBERS = ("queue", *MESSAGE_MEMBERS)

routes = web.RouteTableDef()


def _items(body: Mapping[str, Any], name: str) -> list[Any]:
    items = body.get(name, [])
    if not isinstance(items, list):
        raise InvalidInput(f"{name} must be an array")
    return items


def _queue_name(item: Any, where: str, members: tuple[str, ...]) -> str:
    """The ``queue`` member of an item whose members are all among ``members``."""
    if not isinstance(item, Mapping):
        raise InvalidInput(f"{where} must be an object")
    refuse_unknown(item, members, where)
    name = item.get("queue")
    if not isinstance(name, str):
        raise InvalidInput(f"{where}.queue must be a string")
    return check_name("queue", name)


@routes.post(TRANSACTIONS_PATH)
async def transact(request: web.Request) -> web.Response:
    body = body_object(await read_body(request), _MEMBERS)
    deletes_in, enqueues_in = _items(body, "delete"), _items(body, "enqueue")
    service = request.app[QUEUES]
    limit = service.limits.max_batch
    if not deletes_in and not enqueues_in:
        raise InvalidInput("a transaction needs at least one delete or enqueue")
    if len(deletes_in) + len(enqueues_in) > limit:
        raise InvalidInput(
            f"a transaction holds at most {limit} deletes and enqueues, "
            f"got {len(deletes_in) + len(enqueues_in)}"
        )
    binary = sends_msgpack(request)
    catalog = request.app[CATALOG]
    infos: dict[str, QueueInfo] = {}

    async def info(name: str) -> QueueInfo:
        if name not in infos:
            require(request, WRITE, "queue", name)
            infos[name] = await catalog.queue(name)
        return infos[name]

    deletes: list[TxnDelete] = []
    for i, item in enumerate(deletes_in):
        where = f"delete[{i}]"
        name = _queue_name(item, where, _DELETE_MEMBERS)
        receipt = item.get("receipt")
        if not isinstance(receipt, str):
            raise InvalidInput(f"{where}.receipt must be a string")
        mid, delivery = decode_receipt(receipt)
        deletes.append(TxnDelete(await info(name), mid, delivery, receipt))
    enqueues: list[TxnEnqueue] = []
    for i, item in enumerate(enqueues_in):
        where = f"enqueue[{i}]"
        name = _queue_name(item, where, _ENQUEUE_MEMBERS)
        message = new_message(item, binary, where, _ENQUEUE_MEMBERS)
        enqueues.append(TxnEnqueue(await info(name), message))
    require_batch_tags(request, [e.message for e in enqueues])
    outcome = await service.transactions.run(deletes, enqueues)
    out_binary = wants_msgpack(request)
    enqueued: list[dict[str, Any]] = []
    for e in outcome.enqueued:
        one: dict[str, Any] = {"queue": e.queue, "id": e.id if out_binary else str(e.id)}
        if e.duplicate:
            one["duplicate"] = True
        enqueued.append(one)
    out: dict[str, Any] = {"enqueued": enqueued, "deleted": outcome.deleted}
    if outcome.replayed:
        out["replayed"] = True
    return respond(request, out, binary=out_binary)
