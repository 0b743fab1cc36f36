"""Amazon SNS on the node: the Query protocol botocore uses for SNS (``POST /``,
form-encoded ``Action=...``, XML answers).

SNS topics *are* dynaq topics, and an ``sqs`` subscription *is* a dynaq
subscription of a queue (one per topic and queue: its ARN is the topic's ARN
and the queue's name), so a message published through either API reaches the
queues of both. Subscriptions made through SNS default to SNS's enveloped
delivery (``RawMessageDelivery`` false); filter policies use SNS's grammar on
message attributes (``FilterPolicyScope`` ``MessageAttributes``) or on JSON
message bodies (``MessageBody``).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from dynaq.api.aws.query_wire import (
    QueryError,
    attribute_entries,
    entries,
    invalid,
    members,
    message_attributes,
    not_found,
    ok,
    query_form,
    xml,
)
from dynaq.api.aws.sigv4 import AccessKey
from dynaq.api.aws.sns_fifo import (
    check_new_topic,
    check_subscription,
    fifo_attributes,
    message_tags,
)
from dynaq.api.aws.sns_options import subscription_options, topic_attributes
from dynaq.api.aws.sns_publish import (
    check_attributes,
    check_batch_size,
    check_entry_ids,
    check_message,
    check_subject,
    check_tag,
    failed_entry,
    structured,
    value_invalid,
)
from dynaq.api.aws.sqs import SQS, authenticate
from dynaq.api.aws.sqs_wire import ACCOUNT, SqsError, to_dynaq_attributes
from dynaq.api.codec import read_raw
from dynaq.api.keys import CATALOG, QUEUES, TOPICS
from dynaq.core.access import ADMIN, READ, WRITE
from dynaq.core.messages import SUBJECT_ATTRIBUTE, NewMessage
from dynaq.errors import AlreadyExists, DynaqError, InvalidInput, NotFound
from dynaq.services.queue_records import Subscription

Params = Mapping[str, str]
Action = Callable[["SnsCall"], Awaitable[web.Response]]
ACTIONS: dict[str, Action] = {}
_PAGE = 100
MAX_BATCH = 10


class SnsCall:
    """One SNS request: its parameters, who signed it, and the ARN helpers."""

    def __init__(
        self, request: web.Request, params: Params, key: AccessKey | None, region: str
    ) -> None:
        self.request = request
        self.params = params
        self.key = key
        self.region = region

    def topic_arn(self, topic: str) -> str:
        return f"arn:aws:sns:{self.region}:{ACCOUNT}:{topic}"

    def queue_arn(self, queue: str) -> str:
        return f"arn:aws:sqs:{self.region}:{ACCOUNT}:{queue}"

    def required(self, name: str) -> str:
        value = self.params.get(name)
        if not value:
            raise invalid(f"{name}")
        return value

    def topic_of(self, name: str = "TopicArn") -> str:
        arn = self.required(name)
        parts = arn.split(":")
        if len(parts) != 6 or parts[:3] != ["arn", "aws", "sns"]:
            raise invalid(f"{name} Reason: An ARN must have 6 elements")
        return parts[5]

    def require(self, perm: str, topic: str) -> None:
        token = None if self.key is None else self.key.token
        if token is not None and not token.allows(perm, "topic", topic):
            raise QueryError("AuthorizationError", f"Not authorized to {perm} topic {topic}.", 403)


def action(name: str) -> Callable[[Action], Action]:
    def register(fn: Action) -> Action:
        ACTIONS[name] = fn
        return fn

    return register


async def endpoint(request: web.Request) -> web.StreamResponse:
    """``POST /`` with a form-encoded ``Action``: dispatch an SNS action."""
    try:
        return await _dispatch(request)
    except QueryError as exc:
        return exc.response()


async def _dispatch(request: web.Request) -> web.StreamResponse:
    try:
        body = await read_raw(request)
    except DynaqError as exc:  # a body its Content-Encoding cannot decode, or too slow
        code = "RequestTimeout" if exc.status == 408 else "InvalidParameter"
        raise QueryError(code, exc.message, exc.status) from None
    settings = request.app[SQS]
    try:
        key = await authenticate(request, body, settings)
    except SqsError as exc:
        raise QueryError(exc.code, exc.message, exc.status) from None
    form = query_form(request, body)
    name = form.get("Action", "")
    handler = ACTIONS.get(name)
    if handler is None:
        raise QueryError("InvalidAction", f"The action {name} is not valid for this endpoint.")
    try:
        return await handler(SnsCall(request, form, key, settings.region))
    except NotFound as exc:
        raise not_found(exc.message) from None
    except AlreadyExists as exc:
        raise invalid(exc.message) from None
    except InvalidInput as exc:
        raise invalid(exc.message) from None
    except SqsError as exc:
        raise invalid(exc.message) from None
    except DynaqError as exc:
        status = exc.status if exc.status >= 500 else 400
        raise QueryError(
            "InternalError" if status >= 500 else "InvalidParameter", exc.message, status
        ) from None


@action("CreateTopic")
async def create_topic(call: SnsCall) -> web.Response:
    name = call.required("Name")
    check_new_topic(name, entries(call.params, "Attributes", "key", "value"))
    call.require(ADMIN, name)
    catalog = call.request.app[CATALOG]
    with contextlib.suppress(AlreadyExists):  # an existing topic answers its ARN, as on SNS
        await catalog.create_topic(name)
    return ok("CreateTopic", xml("TopicArn", call.topic_arn(name)))


@action("GetTopicAttributes")
async def get_topic_attributes(call: SnsCall) -> web.Response:
    topic = call.topic_of()
    call.require(READ, topic)
    info = await call.request.app[CATALOG].topic(topic)
    attrs = topic_attributes(call.topic_arn(topic), ACCOUNT, len(info.queues))
    attrs.update(fifo_attributes(topic))
    return ok("GetTopicAttributes", f"<Attributes>{attribute_entries(attrs)}</Attributes>")


@action("DeleteTopic")
async def delete_topic(call: SnsCall) -> web.Response:
    topic = call.topic_of()
    call.require(ADMIN, topic)
    with contextlib.suppress(NotFound):  # deleting a topic that is gone succeeds, as on SNS
        await call.request.app[CATALOG].delete_topic(topic)
    return ok("DeleteTopic")


def _page(names: list[str], token: str | None) -> tuple[list[str], str | None]:
    if token:
        names = [n for n in names if n > token]
    page = names[:_PAGE]
    return page, (page[-1] if len(names) > _PAGE else None)


@action("ListTopics")
async def list_topics(call: SnsCall) -> web.Response:
    topics = await call.request.app[CATALOG].listed_topic_names()
    page, nxt = _page(topics, call.params.get("NextToken"))
    result = xml("Topics", [{"TopicArn": call.topic_arn(t)} for t in page])
    if nxt:
        result += xml("NextToken", nxt)
    return ok("ListTopics", result)


def _subscription_arn(call: SnsCall, topic: str, queue: str) -> str:
    return f"{call.topic_arn(topic)}:{queue}"


def _split_subscription(call: SnsCall) -> tuple[str, str]:
    arn = call.required("SubscriptionArn")
    parts = arn.split(":")
    if len(parts) != 7 or parts[:3] != ["arn", "aws", "sns"]:
        raise invalid("SubscriptionArn Reason: An ARN must have 7 elements")
    return parts[5], parts[6]


@action("Subscribe")
async def subscribe(call: SnsCall) -> web.Response:
    topic = call.topic_of()
    call.require(ADMIN, topic)
    if call.required("Protocol") != "sqs":
        raise invalid("Protocol Reason: dynaq delivers to sqs endpoints (its queues) only")
    endpoint_arn = call.required("Endpoint")
    parts = endpoint_arn.split(":")
    if len(parts) != 6 or parts[:3] != ["arn", "aws", "sqs"]:
        raise invalid("SQS endpoint ARN")
    queue = parts[5]
    attrs = entries(call.params, "Attributes", "key", "value")
    catalog = call.request.app[CATALOG]
    arn = xml("SubscriptionArn", _subscription_arn(call, topic, queue))
    info = await catalog.topic(topic)
    with contextlib.suppress(NotFound):  # a missing queue: the subscribe below says so
        check_subscription(topic, queue, (await catalog.queue(queue)).settings.fifo)
    if queue in info.queues:
        # As SNS: subscribing again is idempotent and keeps the subscription as it
        # is (a re-run of set-up code must not drop its filter policy); asking for
        # other attributes than it has is refused, not applied.
        current = info.subscription(queue)
        if subscription_options(attrs, current) != current:
            raise invalid(
                "Attributes Reason: Subscription already exists with different attributes"
            )
        return ok("Subscribe", arn)
    await catalog.subscribe(topic, queue, subscription_options(attrs, Subscription(raw=False)))
    return ok("Subscribe", arn)


@action("Unsubscribe")
async def unsubscribe(call: SnsCall) -> web.Response:
    topic, queue = _split_subscription(call)
    call.require(ADMIN, topic)
    await call.request.app[CATALOG].unsubscribe(topic, queue)
    return ok("Unsubscribe")


async def _subscriptions(call: SnsCall, topics: list[str]) -> list[dict[str, str]]:
    out = []
    catalog = call.request.app[CATALOG]
    for t in topics:
        info = await catalog.topic(t)
        for q in info.queues:
            out.append({
                "SubscriptionArn": _subscription_arn(call, t, q),
                "Owner": ACCOUNT,
                "Protocol": "sqs",
                "Endpoint": call.queue_arn(q),
                "TopicArn": call.topic_arn(t),
            })  # fmt: skip
    return out


@action("ListSubscriptions")
async def list_subscriptions(call: SnsCall) -> web.Response:
    subs = await _subscriptions(call, await call.request.app[CATALOG].listed_topic_names())
    return ok("ListSubscriptions", xml("Subscriptions", subs))


@action("ListSubscriptionsByTopic")
async def list_subscriptions_by_topic(call: SnsCall) -> web.Response:
    topic = call.topic_of()
    call.require(READ, topic)
    subs = await _subscriptions(call, [topic])
    return ok("ListSubscriptionsByTopic", xml("Subscriptions", subs))


async def _current(call: SnsCall) -> tuple[str, str, Subscription]:
    topic, queue = _split_subscription(call)
    info = await call.request.app[CATALOG].topic(topic)
    if queue not in info.queues:
        raise not_found("Subscription does not exist")
    return topic, queue, info.subscription(queue)


@action("GetSubscriptionAttributes")
async def get_subscription_attributes(call: SnsCall) -> web.Response:
    topic, queue, sub = await _current(call)
    call.require(READ, topic)
    attrs = {
        "SubscriptionArn": _subscription_arn(call, topic, queue),
        "TopicArn": call.topic_arn(topic),
        "Owner": ACCOUNT,
        "Protocol": "sqs",
        "Endpoint": call.queue_arn(queue),
        "RawMessageDelivery": "true" if sub.raw else "false",
        "PendingConfirmation": "false",
        "ConfirmationWasAuthenticated": "true",
    }
    if sub.filter_policy is not None:
        attrs["FilterPolicy"] = json.dumps(sub.filter_policy)
        attrs["FilterPolicyScope"] = (
            "MessageBody" if sub.filter_scope == "body" else "MessageAttributes"
        )
    return ok("GetSubscriptionAttributes", f"<Attributes>{attribute_entries(attrs)}</Attributes>")


@action("SetSubscriptionAttributes")
async def set_subscription_attributes(call: SnsCall) -> web.Response:
    topic, queue, sub = await _current(call)
    call.require(ADMIN, topic)
    options = subscription_options(
        {call.required("AttributeName"): call.params.get("AttributeValue", "")}, sub
    )
    await call.request.app[CATALOG].subscribe(topic, queue, options)
    return ok("SetSubscriptionAttributes")


def _message(topic: str, p: Mapping[str, str], attrs: dict[str, dict[str, Any]]) -> NewMessage:
    body = p.get("Message")
    if not body:
        raise invalid("Empty message")
    structure = p.get("MessageStructure")
    if structure:  # empty: absent, as it always read
        if structure != "json":
            raise invalid("MessageStructure: the only structure is json")
        body = structured(body)
    check_message(body)
    subject = p.get("Subject")
    check_subject(subject)
    group, dedup = p.get("MessageGroupId"), p.get("MessageDeduplicationId")
    check_tag("MessageGroupId", group)
    check_tag("MessageDeduplicationId", dedup)
    group, dedup = message_tags(topic, body, group, dedup)
    check_attributes(attrs)
    try:
        dynaq_attrs, _ = to_dynaq_attributes(attrs or None)
    except SqsError as exc:  # the count, a reserved name, a malformed BinaryValue
        raise value_invalid(exc.message) from None
    if subject is not None:
        dynaq_attrs[SUBJECT_ATTRIBUTE] = subject
    return NewMessage(body.encode(), dynaq_attrs or None, group, dedup)


@action("Publish")
async def publish(call: SnsCall) -> web.Response:
    topic = call.topic_of("TopicArn" if "TopicArn" in call.params else "TargetArn")
    call.require(WRITE, topic)
    message = _message(topic, call.params, message_attributes(call.params))
    mid = str(uuid.uuid4())
    await call.request.app[TOPICS].publish(topic, [message], message_ids=[mid])
    return ok("Publish", xml("MessageId", mid))


@action("PublishBatch")
async def publish_batch(call: SnsCall) -> web.Response:
    topic = call.topic_of()
    call.require(WRITE, topic)
    batch = members(call.params, "PublishBatchRequestEntries")
    if not batch:
        raise QueryError("EmptyBatchRequest", "The batch request doesn't contain any entries")
    if len(batch) > MAX_BATCH:
        raise QueryError(
            "TooManyEntriesInBatchRequest",
            "The batch request contains more entries than permissible",
        )
    check_entry_ids([e.get("Id") for e in batch])
    queues = call.request.app[QUEUES]
    check_batch_size(batch, queues.limits.max_message_bytes)
    good: list[tuple[str, NewMessage]] = []
    failed: list[dict[str, Any]] = []
    for e in batch:  # what is wrong with one entry fails that entry only
        try:
            message = _message(topic, e, message_attributes(e))
            queues.check_batch([message])  # its size, group and dedup id, as publish checks
        except (QueryError, DynaqError) as exc:
            failed.append(failed_entry(e["Id"], exc))
            continue
        good.append((e["Id"], message))
    mids = [str(uuid.uuid4()) for _ in good]
    if good:
        await call.request.app[TOPICS].publish(topic, [m for _, m in good], message_ids=mids)
    result = xml(
        "Successful", [{"Id": i, "MessageId": m} for (i, _), m in zip(good, mids, strict=True)]
    )
    result += xml("Failed", failed)
    return ok("PublishBatch", result)
