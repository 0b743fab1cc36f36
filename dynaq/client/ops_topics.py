"""Topic operations as data: topics, subscriptions, publishing (see :mod:`dynaq.client.ops`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dynaq.client.ops import JSON, Call, Op, json_bytes, nothing, quoted, send_messages, single
from dynaq.client.types import MessageLike

# topics ----------------------------------------------------------------------


def list_topics() -> Op[list[str]]:
    return single(Call("GET", "/v1/topics", lambda got: list(got["topics"])))


def create_topic(name: str) -> Op[None]:
    return single(Call("PUT", f"/v1/topics/{quoted(name)}", nothing))


def topic_queues(name: str) -> Op[list[str]]:
    return single(Call("GET", f"/v1/topics/{quoted(name)}", lambda got: list(got["Queues"])))


DEFAULT_SUBSCRIPTION: Mapping[str, Any] = {
    "filter_policy": None,
    "filter_scope": "attributes",
    "raw_delivery": True,
}


def topic_subscriptions(name: str) -> Op[dict[str, dict[str, Any]]]:
    """Each subscribed queue's options: ``filter_policy``, ``filter_scope``, ``raw_delivery``
    (:meth:`subscribe`'s arguments), in subscription order."""

    def read(got: Any) -> dict[str, dict[str, Any]]:
        options = got.get("Subscriptions") or {}
        return {q: {**DEFAULT_SUBSCRIPTION, **options.get(q, {})} for q in got["Queues"]}

    return single(Call("GET", f"/v1/topics/{quoted(name)}", read))


def delete_topic(name: str) -> Op[None]:
    return single(Call("DELETE", f"/v1/topics/{quoted(name)}", nothing))


def subscribe(
    topic: str,
    queue: str,
    filter_policy: Mapping[str, Any] | None = None,
    filter_scope: str = "attributes",
    raw_delivery: bool = True,
) -> Op[list[str]]:
    """Subscribe ``queue`` to ``topic`` (idempotent): only messages ``filter_policy``
    matches on their attributes (or, with ``filter_scope="body"``, their JSON bodies),
    raw or in an envelope; the options replace the subscription's own. Only the
    options that differ from the defaults are sent (none: no body), so a plain
    subscribe reads the same to nodes that predate an option."""
    path = f"/v1/topics/{quoted(topic)}/queues/{quoted(queue)}"
    options: dict[str, Any] = {}
    if filter_policy is not None:
        options["filter_policy"] = dict(filter_policy)
    if filter_scope != "attributes":
        options["filter_scope"] = filter_scope
    if not raw_delivery:
        options["raw_delivery"] = False
    if not options:
        return single(Call("PUT", path, _queues))
    body = json_bytes(options)
    return single(Call("PUT", path, _queues, body=body, content_type=JSON))


def _queues(got: Any) -> list[str]:
    return list(got["Queues"])


def unsubscribe(topic: str, queue: str) -> Op[list[str]]:
    path = f"/v1/topics/{quoted(topic)}/queues/{quoted(queue)}"
    return single(Call("DELETE", path, lambda got: list(got["Queues"])))


def publish(topic: str, messages: Sequence[MessageLike]) -> Op[dict[str, list[int]]]:
    def merge(results: list[Any]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for got in results:
            for q, ids in got.items():
                out.setdefault(q, []).extend(int(i) for i in ids)
        return out

    return send_messages(f"/v2/topics/{quoted(topic)}/messages", messages, merge)
