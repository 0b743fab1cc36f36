"""SNS's Query protocol, driven by unmodified boto3 against a real node: a topic
fanning out to SQS queues, one with a filter policy and SNS's envelope."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from dynaq.testing.process import NodeProcess, node_process

TOKENS = "ops:sns-admin-0123456789:admin=*,pub:sns-pub-0123456789:write=topic/alerts"
KEYS = "AKIDADMIN:admin-secret:ops,AKIDPUB:pub-secret:pub"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    env = {"DYNAQ_AUTH_TOKENS": TOKENS, "DYNAQ_AWS_KEYS": KEYS}
    p = node_process(tmp_path_factory.mktemp("sns"), env=env)
    p.start()
    try:
        yield p
    finally:
        p.kill()


def _client(
    node: NodeProcess, service: str, key: str = "AKIDADMIN", secret: str = "admin-secret"
) -> Any:
    kw: dict[str, Any] = {
        "endpoint_url": node.url,
        "region_name": "us-east-1",
        "aws_access_key_id": key,
        "aws_secret_access_key": secret,
    }
    return boto3.client("sns", **kw) if service == "sns" else boto3.client("sqs", **kw)


def test_a_topic_fans_out_to_queues_with_a_filter_policy(node: NodeProcess) -> None:
    sns, sqs = _client(node, "sns"), _client(node, "sqs")
    arn = sns.create_topic(Name="orders")["TopicArn"]
    assert arn == "arn:aws:sns:us-east-1:000000000000:orders"
    assert sns.create_topic(Name="orders")["TopicArn"] == arn  # idempotent
    assert {"TopicArn": arn} in sns.list_topics()["Topics"]
    urls = {q: sqs.create_queue(QueueName=q)["QueueUrl"] for q in ("all-orders", "big-orders")}
    qarn = {
        q: sqs.get_queue_attributes(QueueUrl=u, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        for q, u in urls.items()
    }
    raw_sub = sns.subscribe(
        TopicArn=arn, Protocol="sqs", Endpoint=qarn["all-orders"],
        Attributes={"RawMessageDelivery": "true"}, ReturnSubscriptionArn=True,
    )["SubscriptionArn"]  # fmt: skip
    policy = {"kind": ["order"], "amount": [{"numeric": [">=", 100]}]}
    env_sub = sns.subscribe(
        TopicArn=arn, Protocol="sqs", Endpoint=qarn["big-orders"],
        Attributes={"FilterPolicy": json.dumps(policy)}, ReturnSubscriptionArn=True,
    )["SubscriptionArn"]  # fmt: skip
    subs = sns.list_subscriptions_by_topic(TopicArn=arn)["Subscriptions"]
    assert sorted(s["Endpoint"] for s in subs) == sorted(qarn.values())
    got = sns.get_subscription_attributes(SubscriptionArn=env_sub)["Attributes"]
    assert json.loads(got["FilterPolicy"]) == policy and got["RawMessageDelivery"] == "false"
    assert got["FilterPolicyScope"] == "MessageAttributes"

    big = sns.publish(
        TopicArn=arn, Message="big order", Subject="hi",
        MessageAttributes={"kind": {"DataType": "String", "StringValue": "order"},
                           "amount": {"DataType": "Number", "StringValue": "250"}},
    )["MessageId"]  # fmt: skip
    sns.publish(
        TopicArn=arn, Message="small order",
        MessageAttributes={"kind": {"DataType": "String", "StringValue": "order"},
                           "amount": {"DataType": "Number", "StringValue": "5"}},
    )  # fmt: skip
    batch = sns.publish_batch(
        TopicArn=arn,
        PublishBatchRequestEntries=[
            {"Id": "a", "Message": "refund", "MessageAttributes": {
                "kind": {"DataType": "String", "StringValue": "refund"}}},
            {"Id": "b", "Message": "huge order", "MessageAttributes": {
                "kind": {"DataType": "String", "StringValue": "order"},
                "amount": {"DataType": "Number", "StringValue": "1000"}}},
        ],
    )  # fmt: skip
    assert sorted(s["Id"] for s in batch["Successful"]) == ["a", "b"] and not batch["Failed"]

    def drain(url: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for _ in range(5):
            r = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                    MessageAttributeNames=["All"])  # fmt: skip
            out += r.get("Messages", [])
        return out

    raw = drain(urls["all-orders"])
    assert sorted(m["Body"] for m in raw) == ["big order", "huge order", "refund", "small order"]
    typed = {m["Body"]: m.get("MessageAttributes", {}) for m in raw}
    assert typed["big order"]["amount"] == {"DataType": "Number", "StringValue": "250"}
    copies = drain(urls["big-orders"])
    # As SNS delivers them: the attributes (and the Subject) only inside the envelope.
    assert all("MessageAttributes" not in m for m in copies), copies
    enveloped = [json.loads(m["Body"]) for m in copies]
    assert sorted(e["Message"] for e in enveloped) == ["big order", "huge order"]
    first = next(e for e in enveloped if e["Message"] == "big order")
    assert first["Type"] == "Notification" and first["TopicArn"] == arn
    assert first["MessageId"] == big and first["Subject"] == "hi"
    assert first["MessageAttributes"]["amount"] == {"Type": "Number", "Value": "250"}

    sns.set_subscription_attributes(
        SubscriptionArn=env_sub, AttributeName="RawMessageDelivery", AttributeValue="true"
    )
    assert (
        sns.get_subscription_attributes(SubscriptionArn=env_sub)["Attributes"]["RawMessageDelivery"]
        == "true"
    )
    sns.unsubscribe(SubscriptionArn=raw_sub)
    assert [
        s["SubscriptionArn"] for s in sns.list_subscriptions_by_topic(TopicArn=arn)["Subscriptions"]
    ] == [env_sub]
    sns.delete_topic(TopicArn=arn)
    with pytest.raises(sns.exceptions.NotFoundException):
        sns.publish(TopicArn=arn, Message="gone")


def test_sns_errors_and_grants(node: NodeProcess) -> None:
    sns = _client(node, "sns")
    arn = sns.create_topic(Name="alerts")["TopicArn"]
    with pytest.raises(sns.exceptions.InvalidParameterException):
        sns.subscribe(TopicArn=arn, Protocol="http", Endpoint="http://example.invalid/")
    with pytest.raises(sns.exceptions.NotFoundException):
        sns.publish(TopicArn="arn:aws:sns:us-east-1:000000000000:nothing", Message="x")
    with pytest.raises(sns.exceptions.InvalidParameterException):
        sns.publish(TopicArn=arn, Message="")
    publisher = _client(node, "sns", "AKIDPUB", "pub-secret")
    assert publisher.publish(TopicArn=arn, Message="allowed")["MessageId"]
    with pytest.raises(ClientError) as denied:
        publisher.create_topic(Name="mine")
    assert denied.value.response["Error"]["Code"] == "AuthorizationError"
    with pytest.raises(ClientError) as wrong:
        _client(node, "sns", secret="nope").list_topics()
    assert wrong.value.response["Error"]["Code"] == "SignatureDoesNotMatch"


def _queue_arn(sqs: Any, url: str) -> str:
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    return str(attrs["QueueArn"])


def test_subscribing_again_keeps_the_subscription_or_refuses_other_attributes(
    node: NodeProcess,
) -> None:
    """As SNS: a second Subscribe of the same queue returns the same subscription,
    unchanged (its filter policy and raw delivery kept); one asking for other
    attributes is an InvalidParameter and changes nothing."""
    sns, sqs = _client(node, "sns"), _client(node, "sqs")
    arn = sns.create_topic(Name="resubscribed")["TopicArn"]
    qarn = _queue_arn(sqs, sqs.create_queue(QueueName="resubscribed-q")["QueueUrl"])
    policy = json.dumps({"kind": ["order"]})
    attrs = {"FilterPolicy": policy, "RawMessageDelivery": "true"}
    sub = sns.subscribe(
        TopicArn=arn, Protocol="sqs", Endpoint=qarn, Attributes=attrs, ReturnSubscriptionArn=True
    )["SubscriptionArn"]

    def current() -> dict[str, str]:
        got = sns.get_subscription_attributes(SubscriptionArn=sub)["Attributes"]
        return {k: got[k] for k in ("FilterPolicy", "RawMessageDelivery")}

    for again in ({}, attrs, {"RawMessageDelivery": "true"}):
        same = sns.subscribe(
            TopicArn=arn, Protocol="sqs", Endpoint=qarn, Attributes=again,
            ReturnSubscriptionArn=True,
        )["SubscriptionArn"]  # fmt: skip
        assert same == sub
        assert json.loads(current()["FilterPolicy"]) == json.loads(policy)
        assert current()["RawMessageDelivery"] == "true"
    for other in ({"RawMessageDelivery": "false"}, {"FilterPolicy": "{}"}):
        with pytest.raises(sns.exceptions.InvalidParameterException, match="different attributes"):
            sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint=qarn, Attributes=other)
    assert json.loads(current()["FilterPolicy"]) == json.loads(policy)
    assert current()["RawMessageDelivery"] == "true"


def test_message_structure_json_delivers_the_sqs_entry_or_the_default(node: NodeProcess) -> None:
    """``MessageStructure=json``: one message per protocol; a queue gets the ``sqs``
    entry, else ``default``, raw or inside the envelope (with the Subject)."""
    sns, sqs = _client(node, "sns"), _client(node, "sqs")
    arn = sns.create_topic(Name="structured")["TopicArn"]
    raw_url = sqs.create_queue(QueueName="structured-raw")["QueueUrl"]
    env_url = sqs.create_queue(QueueName="structured-env")["QueueUrl"]
    sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint=_queue_arn(sqs, raw_url),
                  Attributes={"RawMessageDelivery": "true"})  # fmt: skip
    sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint=_queue_arn(sqs, env_url))
    per_protocol = {"default": "for everyone", "sqs": "for queues", "email": "for people"}
    sns.publish(TopicArn=arn, Message=json.dumps(per_protocol), MessageStructure="json",
                Subject="Order 42 shipped!")  # fmt: skip
    sns.publish_batch(TopicArn=arn, PublishBatchRequestEntries=[
        {"Id": "a", "Message": json.dumps({"default": "only default"}), "MessageStructure": "json"},
        {"Id": "b", "Message": '{"sqs": "no default"}', "MessageStructure": "json"},
    ])  # fmt: skip

    def bodies(url: str) -> list[str]:
        got: list[str] = []
        for _ in range(10):
            r = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
            got += [m["Body"] for m in r.get("Messages", [])]
            if len(got) >= 2:
                break
        return got

    assert sorted(bodies(raw_url)) == ["for queues", "only default"]
    envelopes = {json.loads(b)["Message"]: json.loads(b) for b in bodies(env_url)}
    assert set(envelopes) == {"for queues", "only default"}
    assert envelopes["for queues"]["Subject"] == "Order 42 shipped!"


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"Message": "{not json", "MessageStructure": "json"}, "failed to parse"),
        ({"Message": '["default"]', "MessageStructure": "json"}, "failed to parse"),
        ({"Message": '{"sqs": "x"}', "MessageStructure": "json"}, "No default entry"),
        ({"Message": '{"default": 7}', "MessageStructure": "json"}, "non-empty string"),
        ({"Message": '{"default": "x"}', "MessageStructure": "xml"}, "MessageStructure"),
        ({"Message": "x", "Subject": " starts with a space"}, "Subject"),
        ({"Message": "x", "Subject": "two\nlines"}, "Subject"),
        ({"Message": "x", "Subject": "caf\u00e9"}, "Subject"),
        ({"Message": "x", "Subject": "s" * 100}, "Subject"),
    ],
)
def test_a_bad_structure_or_subject_is_an_invalid_parameter(
    node: NodeProcess, params: dict[str, str], reason: str
) -> None:
    sns = _client(node, "sns")
    arn = sns.create_topic(Name="checked")["TopicArn"]
    with pytest.raises(sns.exceptions.InvalidParameterException) as bad:
        sns.publish(TopicArn=arn, **params)
    assert reason in bad.value.response["Error"]["Message"]
    out = sns.publish_batch(TopicArn=arn, PublishBatchRequestEntries=[{"Id": "e", **params}])
    [failed] = out["Failed"]
    assert failed["Code"] == "InvalidParameter" and reason in failed["Message"]
    assert sns.publish(TopicArn=arn, Message="x", Subject="s" * 99)["MessageId"]


def test_a_filter_policy_must_fit_its_scope(node: NodeProcess) -> None:
    sns, sqs = _client(node, "sns"), _client(node, "sqs")
    arn = sns.create_topic(Name="scoped")["TopicArn"]
    qarn = _queue_arn(sqs, sqs.create_queue(QueueName="scoped-q")["QueueUrl"])
    nested = json.dumps({"order": {"region": ["eu"]}})
    for attrs in (
        {"FilterPolicy": nested},  # nested keys read as attributes
        {"FilterPolicy": nested, "FilterPolicyScope": "Headers"},
        {"FilterPolicy": json.dumps({"a": {}}), "FilterPolicyScope": "MessageBody"},
    ):
        with pytest.raises(sns.exceptions.InvalidParameterException):
            sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint=qarn, Attributes=attrs)
    sub = sns.subscribe(
        TopicArn=arn, Protocol="sqs", Endpoint=qarn, ReturnSubscriptionArn=True,
        Attributes={"FilterPolicy": nested, "FilterPolicyScope": "MessageBody"},
    )["SubscriptionArn"]  # fmt: skip
    # Switching the scope back re-checks the policy against it: refused, nothing changes.
    with pytest.raises(sns.exceptions.InvalidParameterException):
        sns.set_subscription_attributes(
            SubscriptionArn=sub, AttributeName="FilterPolicyScope",
            AttributeValue="MessageAttributes",
        )  # fmt: skip
    got = sns.get_subscription_attributes(SubscriptionArn=sub)["Attributes"]
    assert got["FilterPolicyScope"] == "MessageBody" and json.loads(got["FilterPolicy"]) == {
        "order": {"region": ["eu"]}
    }


def test_a_filter_policy_nested_past_any_limit_is_an_invalid_parameter(node: NodeProcess) -> None:
    """Thousands of nested brackets once blew the JSON parser's recursion: a 500."""
    sns, sqs = _client(node, "sns"), _client(node, "sqs")
    arn = sns.create_topic(Name="deep")["TopicArn"]
    qarn = _queue_arn(sqs, sqs.create_queue(QueueName="deep-q")["QueueUrl"])
    for policy in ("[" * 5000, '{"a":' * 5000):
        with pytest.raises(sns.exceptions.InvalidParameterException):
            sns.subscribe(
                TopicArn=arn, Protocol="sqs", Endpoint=qarn, Attributes={"FilterPolicy": policy}
            )


def test_get_topic_attributes_shows_the_topic(node: NodeProcess) -> None:
    sns, sqs = _client(node, "sns"), _client(node, "sqs")
    arn = sns.create_topic(Name="described")["TopicArn"]
    attrs = sns.get_topic_attributes(TopicArn=arn)["Attributes"]
    assert attrs["TopicArn"] == arn and attrs["Owner"] == "000000000000"
    assert attrs["SubscriptionsConfirmed"] == "0" and attrs["SubscriptionsPending"] == "0"
    for q in ("described-a", "described-b"):
        qarn = _queue_arn(sqs, sqs.create_queue(QueueName=q)["QueueUrl"])
        sns.subscribe(TopicArn=arn, Protocol="sqs", Endpoint=qarn)
    assert sns.get_topic_attributes(TopicArn=arn)["Attributes"]["SubscriptionsConfirmed"] == "2"
    with pytest.raises(sns.exceptions.NotFoundException):
        sns.get_topic_attributes(TopicArn=arn + "-missing")
    with pytest.raises(sns.exceptions.InvalidParameterException):
        sns.get_topic_attributes(TopicArn="not-an-arn")


def _code(exc: ClientError) -> str:
    return str(exc.response["Error"]["Code"])


def test_a_standard_topic_refuses_a_dedup_id(node: NodeProcess) -> None:
    """SNS refuses MessageDeduplicationId on a standard topic; taken, it dropped every
    later publish with that id from every subscribed queue, each answered 200."""
    sns, sqs = _client(node, "sns"), _client(node, "sqs")
    topic = sns.create_topic(Name="std-dedup")["TopicArn"]
    url = sqs.create_queue(QueueName="std-dedup-q")["QueueUrl"]
    sns.subscribe(
        TopicArn=topic, Protocol="sqs", Endpoint=_queue_arn(sqs, url),
        Attributes={"RawMessageDelivery": "true"},
    )  # fmt: skip
    with pytest.raises(ClientError) as refused:
        sns.publish(TopicArn=topic, Message="d0", MessageDeduplicationId="same")
    assert _code(refused.value) == "InvalidParameter"
    batch = sns.publish_batch(
        TopicArn=topic,
        PublishBatchRequestEntries=[
            {"Id": "a", "Message": "d1", "MessageDeduplicationId": "same"},
            {"Id": "b", "Message": "d2"},
        ],
    )
    assert [f["Id"] for f in batch["Failed"]] == ["a"]
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in got] == ["d2"]


def test_fifo_topics(node: NodeProcess) -> None:
    """A FIFO topic is named ``.fifo`` with FifoTopic=true; its publishes need a group,
    dedup by content without an id, and only FIFO topics feed FIFO queues."""
    sns, sqs = _client(node, "sns"), _client(node, "sqs")
    for name, attrs in (
        ("plain-named", {"FifoTopic": "true"}),  # FIFO needs the suffix
        ("suffixed.fifo", {}),  # the suffix needs FifoTopic
        ("odd", {"Bogus": "1"}),  # an attribute SNS does not have
        ("cbd", {"ContentBasedDeduplication": "true"}),  # FIFO topics only
    ):
        with pytest.raises(ClientError) as refused:
            sns.create_topic(Name=name, Attributes=attrs)
        assert _code(refused.value) == "InvalidParameter", name
    topic = sns.create_topic(
        Name="orders.fifo", Attributes={"FifoTopic": "true", "DisplayName": "Orders"}
    )["TopicArn"]
    attrs = sns.get_topic_attributes(TopicArn=topic)["Attributes"]
    assert attrs["FifoTopic"] == "true" and attrs["ContentBasedDeduplication"] == "true"
    fifo_q = sqs.create_queue(QueueName="orders-q.fifo", Attributes={"FifoQueue": "true"})
    sns.subscribe(
        TopicArn=topic, Protocol="sqs", Endpoint=_queue_arn(sqs, fifo_q["QueueUrl"]),
        Attributes={"RawMessageDelivery": "true"},
    )  # fmt: skip
    with pytest.raises(ClientError) as refused:
        sns.publish(TopicArn=topic, Message="no group")
    assert _code(refused.value) == "InvalidParameter"
    for body in ("one", "one", "two"):  # the second "one": the same content, dropped
        sns.publish(TopicArn=topic, Message=body, MessageGroupId="g")
    seen = []
    for _ in range(3):
        for m in sqs.receive_message(
            QueueUrl=fifo_q["QueueUrl"], MaxNumberOfMessages=10, AttributeNames=["All"]
        ).get("Messages", []):
            assert m["Attributes"]["MessageGroupId"] == "g"
            seen.append(m["Body"])
            sqs.delete_message(QueueUrl=fifo_q["QueueUrl"], ReceiptHandle=m["ReceiptHandle"])
    assert seen == ["one", "two"]
    standard = sns.create_topic(Name="not-fifo")["TopicArn"]
    with pytest.raises(ClientError) as refused:
        sns.subscribe(
            TopicArn=standard, Protocol="sqs", Endpoint=_queue_arn(sqs, fifo_q["QueueUrl"])
        )
    assert _code(refused.value) == "InvalidParameter"
    assert "FIFO" in str(refused.value)
