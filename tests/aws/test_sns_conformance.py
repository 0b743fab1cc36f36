"""SNS conformance against moto's server (run in this test): the same boto3 calls
against a dynaq node and moto (whose state is per process: these names are not
:mod:`tests.aws.test_sqs_conformance`'s), compared field by field after the exclusions of
:mod:`tests.aws.test_sqs_conformance` (plus subscription ARNs' suffix, which SNS
draws at random and dynaq derives from the queue)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer

from dynaq.testing.process import NodeProcess, free_port, node_process


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    p = node_process(tmp_path_factory.mktemp("sns-conformance"))
    p.start()
    try:
        yield p
    finally:
        p.kill()


def _clients(url: str) -> tuple[Any, Any]:
    kw: dict[str, Any] = {
        "endpoint_url": url,
        "region_name": "us-east-1",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
    }
    return boto3.client("sns", **kw), boto3.client("sqs", **kw)


_DROP = {"ResponseMetadata", "MessageId", "ReceiptHandle", "Timestamp", "SigningCertURL",
         "Signature", "SignatureVersion", "UnsubscribeURL", "Owner"}  # fmt: skip


def _normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _normalize(v) for k, v in value.items() if k not in _DROP}
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    if isinstance(value, str):
        value = re.sub(r"^https?://[^/]+/\d{12}/", "URL/", value)
        value = re.sub(
            r"(arn:aws:sns:[a-z0-9-]+:)\d{12}(:[A-Za-z0-9_.-]+):[A-Za-z0-9_.-]+$",
            r"\1ACCOUNT\2:SUB",
            value,
        )
        return re.sub(r"arn:aws:(sns|sqs):([a-z0-9-]+):\d{12}:", r"arn:aws:\1:\2:ACCOUNT:", value)
    return value


def test_the_same_sns_calls_give_the_same_answers(node: NodeProcess, moto_url: str) -> None:
    sides = {"dynaq": _clients(node.url), "moto": _clients(moto_url)}
    state: dict[str, dict[str, Any]] = {name: {} for name in sides}

    def same(step: str, fn: Callable[[str, Any, Any], Any]) -> dict[str, Any]:
        raw: dict[str, Any] = {}
        got: dict[str, Any] = {}
        for name, (sns, sqs) in sides.items():
            try:
                raw[name] = fn(name, sns, sqs)
                got[name] = _normalize(raw[name])
            except ClientError as exc:
                raw[name] = None
                got[name] = {"error": exc.response["Error"]["Code"]}
        assert got["dynaq"] == got["moto"], f"{step}: dynaq {got['dynaq']} != moto {got['moto']}"
        return raw

    raw = same("create topic", lambda n, sns, sqs: sns.create_topic(Name="snsc-topic"))
    for n, r in raw.items():
        state[n]["topic"] = r["TopicArn"]
    same("create again", lambda n, sns, sqs: sns.create_topic(Name="snsc-topic"))
    for q in ("snsc-raw", "snsc-env"):

        def create(n: str, sns: Any, sqs: Any, q: str = q) -> Any:
            return sqs.create_queue(QueueName=q)

        raw = same(f"queue {q}", create)
        for n, r in raw.items():
            state[n][q] = r["QueueUrl"]
            state[n][q + "-arn"] = sides[n][1].get_queue_attributes(
                QueueUrl=r["QueueUrl"], AttributeNames=["QueueArn"]
            )["Attributes"]["QueueArn"]
    raw = same(
        "subscribe raw",
        lambda n, sns, sqs: sns.subscribe(
            TopicArn=state[n]["topic"], Protocol="sqs", Endpoint=state[n]["snsc-raw-arn"],
            Attributes={"RawMessageDelivery": "true"}, ReturnSubscriptionArn=True,
        ),
    )  # fmt: skip
    policy = json.dumps({"kind": ["order"]})
    raw = same(
        "subscribe with a filter policy",
        lambda n, sns, sqs: sns.subscribe(
            TopicArn=state[n]["topic"], Protocol="sqs", Endpoint=state[n]["snsc-env-arn"],
            Attributes={"FilterPolicy": policy}, ReturnSubscriptionArn=True,
        ),
    )  # fmt: skip
    for n, r in raw.items():
        state[n]["env-sub"] = r["SubscriptionArn"]
    same(
        "raw delivery attribute",
        lambda n, sns, sqs: sns.get_subscription_attributes(SubscriptionArn=state[n]["env-sub"])[
            "Attributes"
        ]["RawMessageDelivery"],
    )
    # Subscribing again (set-up code run twice) keeps the subscription as it is.
    again = same(
        "subscribe again",
        lambda n, sns, sqs: sns.subscribe(
            TopicArn=state[n]["topic"], Protocol="sqs", Endpoint=state[n]["snsc-env-arn"],
            ReturnSubscriptionArn=True,
        ),
    )  # fmt: skip
    assert all(r["SubscriptionArn"] == state[n]["env-sub"] for n, r in again.items())
    same(
        "filter policy kept",
        lambda n, sns, sqs: json.loads(
            sns.get_subscription_attributes(SubscriptionArn=state[n]["env-sub"])["Attributes"][
                "FilterPolicy"
            ]
        ),
    )
    same(
        "publish to nothing",
        lambda n, sns, sqs: sns.publish(TopicArn=state[n]["topic"] + "-nope", Message="x"),
    )
    attrs = {"kind": {"DataType": "String", "StringValue": "order"}}
    same(
        "publish",
        lambda n, sns, sqs: sns.publish(
            TopicArn=state[n]["topic"], Message="m1", MessageAttributes=attrs
        ),
    )
    same(
        "publish filtered out",
        lambda n, sns, sqs: sns.publish(
            TopicArn=state[n]["topic"], Message="m2",
            MessageAttributes={"kind": {"DataType": "String", "StringValue": "other"}},
        ),
    )  # fmt: skip

    def bodies(n: str, sqs: Any, q: str) -> list[str]:
        r = sqs.receive_message(QueueUrl=state[n][q], MaxNumberOfMessages=10, WaitTimeSeconds=1)
        return sorted(m["Body"] for m in r.get("Messages", []))

    same("raw queue", lambda n, sns, sqs: bodies(n, sqs, "snsc-raw"))

    def envelope(n: str, sqs: Any) -> dict[str, Any]:
        [m] = sqs.receive_message(QueueUrl=state[n]["snsc-env"], WaitTimeSeconds=1)["Messages"]
        env = json.loads(m["Body"])
        return {k: env[k] for k in ("Type", "TopicArn", "Message", "MessageAttributes")}

    same("enveloped queue", lambda n, sns, sqs: envelope(n, sqs))
    same(
        "publish batch",
        lambda n, sns, sqs: sns.publish_batch(
            TopicArn=state[n]["topic"],
            PublishBatchRequestEntries=[{"Id": "x", "Message": "b1"}, {"Id": "y", "Message": "b2"}],
        ),
    )
    same("unsubscribe", lambda n, sns, sqs: sns.unsubscribe(SubscriptionArn=state[n]["env-sub"]))
    same(
        "subscriptions after",
        lambda n, sns, sqs: [
            s["Endpoint"]
            for s in sns.list_subscriptions_by_topic(TopicArn=state[n]["topic"])["Subscriptions"]
        ],
    )
    same("delete topic", lambda n, sns, sqs: sns.delete_topic(TopicArn=state[n]["topic"]))


def test_a_batch_entry_without_an_id_is_a_400(node: NodeProcess) -> None:
    """boto3 never sends one; a hand-made request gets SNS's 400, never a 500."""
    sns, _ = _clients(node.url)
    arn = sns.create_topic(Name="no-ids")["TopicArn"]
    form = {
        "Action": "PublishBatch",
        "TopicArn": arn,
        "PublishBatchRequestEntries.member.1.Message": "x",
    }
    req = urllib.request.Request(
        f"{node.url}/", data=urllib.parse.urlencode(form).encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req)
    assert refused.value.code == 400
    assert b"<Code>InvalidBatchEntryId</Code>" in refused.value.read()


def test_body_filter_policies_deliver_what_moto_delivers(node: NodeProcess, moto_url: str) -> None:
    """``FilterPolicyScope: MessageBody`` (payload-based filtering), as moto's SNS does
    it: the same policies on the same JSON bodies pick the same messages, and
    GetSubscriptionAttributes answers the same scope."""
    policies = {
        "bodyf-nested": {
            "order": {"region": [{"prefix": "eu-"}], "total": [{"numeric": [">", 100]}]}
        },
        "bodyf-flat": {"kind": ["refund", "chargeback"]},
        "bodyf-absent": {"coupon": [{"exists": False}]},
        "bodyf-typed": {"code": [100], "label": ["7"]},
        # any element of an array matches (anything-but on arrays is left out: moto
        # excludes an array holding any excluded element, where SNS's documentation
        # matches it when any element is not excluded, as dynaq does; see test_filters)
        "bodyf-array": {"tags": ["spam"]},
    }
    bodies = [
        {"kind": "sale", "order": {"region": "eu-west", "total": 250}},
        {"kind": "refund", "order": {"region": "us-east", "total": 250}, "coupon": "C"},
        {"kind": "chargeback", "order": {"region": "eu-north", "total": 50}},
        {"kind": "sale", "order": {"region": "eu-west", "total": 99}, "coupon": "D"},
        {"code": 100, "label": "7", "tags": ["a", "b"]},
        {"code": "100", "label": 7, "tags": ["a", "spam"]},
        {"code": 100.0, "label": "7", "coupon": None},
    ]
    delivered: dict[str, dict[str, list[str]]] = {}
    scopes: dict[str, set[str]] = {}
    for side, url in (("dynaq", node.url), ("moto", moto_url)):
        sns, sqs = _clients(url)
        topic = sns.create_topic(Name="bodyf-topic")["TopicArn"]
        urls = {}
        for q, policy in policies.items():
            urls[q] = sqs.create_queue(QueueName=q)["QueueUrl"]
            qarn = sqs.get_queue_attributes(QueueUrl=urls[q], AttributeNames=["QueueArn"])[
                "Attributes"
            ]["QueueArn"]
            sub = sns.subscribe(
                TopicArn=topic, Protocol="sqs", Endpoint=qarn, ReturnSubscriptionArn=True,
                Attributes={"RawMessageDelivery": "true", "FilterPolicyScope": "MessageBody",
                            "FilterPolicy": json.dumps(policy)},
            )["SubscriptionArn"]  # fmt: skip
            got = sns.get_subscription_attributes(SubscriptionArn=sub)["Attributes"]
            scopes.setdefault(side, set()).add(got["FilterPolicyScope"])
        for b in bodies:
            sns.publish(TopicArn=topic, Message=json.dumps(b))
        delivered[side] = {}
        for q, u in urls.items():
            seen: list[str] = []
            for _ in range(3):
                r = sqs.receive_message(QueueUrl=u, MaxNumberOfMessages=10, WaitTimeSeconds=1)
                seen += [m["Body"] for m in r.get("Messages", [])]
            delivered[side][q] = sorted(seen)
    assert scopes["dynaq"] == scopes["moto"] == {"MessageBody"}
    assert delivered["dynaq"] == delivered["moto"]
    assert [len(delivered["dynaq"][q]) for q in policies] == [1, 2, 4, 2, 1]
