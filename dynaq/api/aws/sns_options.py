"""SNS attributes: a subscription's into a dynaq
:class:`~dynaq.services.queue_records.Subscription`, and a topic's as SNS shows them."""

from __future__ import annotations

from collections.abc import Mapping

from dynaq.api.aws.query_wire import invalid
from dynaq.api.codec import parse_json
from dynaq.core.body_filters import compile_body_policy
from dynaq.core.filters import compile_policy
from dynaq.errors import InvalidInput
from dynaq.services.queue_records import Subscription

_SCOPES = {"MessageAttributes": "attributes", "MessageBody": "body"}


def subscription_options(attrs: Mapping[str, str], base: Subscription) -> Subscription:
    """``base`` with the SNS subscription attributes ``attrs`` (FilterPolicy,
    FilterPolicyScope, RawMessageDelivery) applied; InvalidParameter names the
    first one SNS would refuse, the policy checked against the scope it ends with."""
    policy, raw, scope = base.filter_policy, base.raw, base.filter_scope
    for name, value in attrs.items():
        if name == "FilterPolicy":
            if value.strip() in ("", "{}"):
                policy = None
            else:
                try:  # the strict parser: bounded nesting, so no RecursionError (a 500)
                    policy = parse_json(value.encode())
                except (InvalidInput, UnicodeEncodeError):
                    raise invalid("FilterPolicy: failed to parse JSON.") from None
        elif name == "FilterPolicyScope":
            if value not in _SCOPES:
                raise invalid("FilterPolicyScope: MessageAttributes or MessageBody")
            scope = _SCOPES[value]
        elif name == "RawMessageDelivery":
            if value.lower() not in ("true", "false"):
                raise invalid("RawMessageDelivery: true or false")
            raw = value.lower() == "true"
        else:
            raise invalid(f"Attributes Reason: Unknown attribute {name}")
    if policy is not None:  # against the scope it ends with; InvalidInput names the rule
        try:
            (compile_body_policy if scope == "body" else compile_policy)(policy)
        except InvalidInput as exc:  # "filter_policy.a: ..." as SNS words it
            where, _, what = exc.message.partition(": ")
            key = where.removeprefix("filter_policy").lstrip(".")
            detail = f"{what} (at {key})" if what and key else exc.message
            raise invalid(f"FilterPolicy: {detail}") from None
    return Subscription(policy, raw, scope)


def topic_attributes(topic_arn: str, owner: str, subscriptions: int) -> dict[str, str]:
    """GetTopicAttributes' answer for a dynaq topic: only what is true of it. It keeps
    no display name, access policy or delivery policy (tokens guard it; delivery is
    to queues, at once), and every subscription is confirmed (an ``sqs`` one always is)."""
    return {
        "TopicArn": topic_arn,
        "Owner": owner,
        "DisplayName": "",
        "SubscriptionsConfirmed": str(subscriptions),
        "SubscriptionsPending": "0",
        "SubscriptionsDeleted": "0",
    }
