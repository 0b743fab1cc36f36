"""What SNS refuses of Publish, PublishBatch and filter policies, and String.Array
attributes in filter policies, driven by unmodified boto3 against a real node."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from dynaq.api.aws.query_wire import QueryError, message_attributes
from dynaq.testing.process import NodeProcess, node_process
from tests.aws.test_sns import KEYS, TOKENS, _client


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    env = {"DYNAQ_AUTH_TOKENS": TOKENS, "DYNAQ_AWS_KEYS": KEYS}
    p = node_process(tmp_path_factory.mktemp("sns-validation"), env=env)
    p.start()
    try:
        yield p
    finally:
        p.kill()


@pytest.fixture(scope="module")
def topic(node: NodeProcess) -> str:
    arn: str = _client(node, "sns").create_topic(Name="checked-input")["TopicArn"]
    return arn


def _queue(node: NodeProcess, name: str) -> tuple[str, str]:
    sqs = _client(node, "sqs")
    url: str = sqs.create_queue(QueueName=name)["QueueUrl"]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    return url, attrs["QueueArn"]


def _bodies(node: NodeProcess, url: str) -> list[str]:
    sqs = _client(node, "sqs")
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    return sorted(m["Body"] for m in got.get("Messages", []))


def _array(value: object) -> dict[str, str]:
    return {"DataType": "String.Array", "StringValue": json.dumps(value)}


def test_a_string_array_attribute_matches_by_its_elements(node: NodeProcess) -> None:
    sns = _client(node, "sns")
    arn = sns.create_topic(Name="arrays")["TopicArn"]
    policies = {
        "arr-eq": {"a": ["x"]},
        "arr-but": {"a": [{"anything-but": ["rugby", "tennis"]}]},
        "arr-num": {"a": [{"numeric": [">", 3, "<=", 10]}]},
    }
    urls = {}
    for name, policy in policies.items():
        urls[name], qarn = _queue(node, name)
        sns.subscribe(
            TopicArn=arn, Protocol="sqs", Endpoint=qarn,
            Attributes={"FilterPolicy": json.dumps(policy), "RawMessageDelivery": "true"},
        )  # fmt: skip
    sent = {
        "s-x": {"DataType": "String", "StringValue": "x"},
        "arr-xy": _array(["x", "y"]),
        "arr-y": _array(["y"]),
        "arr-rugby-golf": _array(["rugby", "golf"]),
        "arr-rugby-tennis": _array(["rugby", "tennis"]),
        "arr-nums": _array(["4", 2, 5]),
        "arr-str-nums": _array(["4", "5"]),
    }
    for body, attr in sent.items():
        sns.publish(TopicArn=arn, Message=body, MessageAttributes={"a": attr})
    assert _bodies(node, urls["arr-eq"]) == ["arr-xy", "s-x"]
    # anything-but: an array matches when any element is not excluded (SNS's docs)
    assert _bodies(node, urls["arr-but"]) == [
        "arr-nums", "arr-rugby-golf", "arr-str-nums", "arr-xy", "arr-y", "s-x",
    ]  # fmt: skip
    assert _bodies(node, urls["arr-num"]) == ["arr-nums"]  # numbers, not strings, in arrays


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"Subject": ""}, "InvalidParameter"),
        ({"Message": "nul \x00 inside"}, "InvalidParameter"),
        ({"MessageGroupId": "g" * 129}, "InvalidParameter"),
        ({"MessageGroupId": "has space"}, "InvalidParameter"),
        ({"MessageAttributes": {"a": {"DataType": "String"}}}, "ParameterValueInvalid"),
        ({"MessageAttributes": {"a": {"DataType": "String", "StringValue": ""}}},
         "ParameterValueInvalid"),
        ({"MessageAttributes": {"a": {"DataType": "String.Array", "StringValue": "[1,"}}},
         "ParameterValueInvalid"),
        ({"MessageAttributes": {"a": {"DataType": "String.Array", "StringValue": '{"a":1}'}}},
         "ParameterValueInvalid"),
        ({"MessageAttributes": {"a": {"DataType": "String", "StringValue": "nul\x00"}}},
         "ParameterValueInvalid"),
        ({"MessageAttributes": {"a": {"DataType": "Text", "StringValue": "x"}}},
         "ParameterValueInvalid"),
        ({"MessageAttributes": {"a": {"DataType": "Binary", "StringValue": "x"}}},
         "ParameterValueInvalid"),
    ] + [
        ({"MessageAttributes": {"n": {"DataType": "Number", "StringValue": v}}},
         "ParameterValueInvalid")
        for v in ("abc", "nan", "inf", "1e200", "1e-200", "1" * 39, "0x10", " 5", "1_000")
    ] + [
        ({"MessageAttributes": {name: {"DataType": "String", "StringValue": "v"}}},
         "ParameterValueInvalid")
        for name in (".a", "a.", "a..b", "a b", "AWS.x", "amazon.x", "n" * 257, "dynaq.x")
    ],
)  # fmt: skip
def test_publish_refuses_what_sns_refuses(
    node: NodeProcess, topic: str, params: dict[str, Any], code: str
) -> None:
    sns = _client(node, "sns")
    call = {"TopicArn": topic, "Message": "x", **params}
    with pytest.raises(ClientError) as refused:
        sns.publish(**call)
    assert refused.value.response["Error"]["Code"] == code
    # in a batch, the same problem fails that entry alone, with the same code
    del call["TopicArn"]
    out = sns.publish_batch(
        TopicArn=topic,
        PublishBatchRequestEntries=[{"Id": "bad", **call}, {"Id": "good", "Message": "fine"}],
    )
    assert [s["Id"] for s in out["Successful"]] == ["good"]
    [failed] = out["Failed"]
    assert failed["Id"] == "bad" and failed["Code"] == code and failed["SenderFault"]


def test_publish_takes_what_sns_takes(node: NodeProcess, topic: str) -> None:
    sns = _client(node, "sns")
    for value in ("-1.5e10", "0", "12345678901234567890123456789012345678", "1e126", "1e-128"):
        number = {"n.1_x-y": {"DataType": "Number", "StringValue": value}}
        assert sns.publish(TopicArn=topic, Message="x", MessageAttributes=number)["MessageId"]
    attrs: dict[str, dict[str, Any]] = {
        "arr": _array(["x", 1, True, None]),
        "b": {"DataType": "Binary", "BinaryValue": b"\0"},
    }
    assert sns.publish(TopicArn=topic, Message="x", Subject="s" * 99, MessageAttributes=attrs)


def test_a_batch_with_bad_ids_or_too_big_is_refused_whole(node: NodeProcess, topic: str) -> None:
    sns = _client(node, "sns")
    for ids in (["a b"], ["x" * 81], [""], ["a.b"]):
        with pytest.raises(sns.exceptions.InvalidBatchEntryIdException):
            sns.publish_batch(
                TopicArn=topic, PublishBatchRequestEntries=[{"Id": i, "Message": "x"} for i in ids]
            )
    with pytest.raises(sns.exceptions.BatchEntryIdsNotDistinctException):
        sns.publish_batch(
            TopicArn=topic,
            PublishBatchRequestEntries=[{"Id": "a", "Message": "x"}, {"Id": "a", "Message": "y"}],
        )
    big = [{"Id": str(i), "Message": "a" * 100_000} for i in range(3)]
    with pytest.raises(sns.exceptions.BatchRequestTooLongException):
        sns.publish_batch(TopicArn=topic, PublishBatchRequestEntries=big)
    out = sns.publish_batch(TopicArn=topic, PublishBatchRequestEntries=big[:2])
    assert len(out["Successful"]) == 2 and out["Failed"] == []


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        (["<", 1, ">", 5], "Too many elements in numeric expression"),
        (["=", 1, "=", 2], "Too many elements in numeric expression"),
        ([">", 5, "<", 1], "Bottom must be less than top"),
        ([">", 1, ">", 5], "Bad numeric range operator"),
    ],
)
@pytest.mark.parametrize("scope", ["MessageAttributes", "MessageBody"])
def test_a_numeric_range_that_cannot_match_is_refused(
    node: NodeProcess, topic: str, spec: list[object], reason: str, scope: str
) -> None:
    sns = _client(node, "sns")
    _, qarn = _queue(node, "ranges")
    policy = json.dumps({"price": [{"numeric": spec}]})
    with pytest.raises(sns.exceptions.InvalidParameterException) as refused:
        sns.subscribe(
            TopicArn=topic, Protocol="sqs", Endpoint=qarn,
            Attributes={"FilterPolicy": policy, "FilterPolicyScope": scope},
        )  # fmt: skip
    message = refused.value.response["Error"]["Message"]
    assert message.startswith("Invalid parameter: FilterPolicy: ") and reason in message


def test_an_attribute_entry_without_a_name_is_refused() -> None:
    params = {"MessageAttributes.entry.1.Value.DataType": "String",
              "MessageAttributes.entry.1.Value.StringValue": "v"}  # fmt: skip
    with pytest.raises(QueryError) as refused:
        message_attributes(params)
    assert refused.value.code == "ParameterValueInvalid"
    ok = {
        "MessageAttributes.entry.2.Name": "a",
        "MessageAttributes.entry.2.Value.DataType": "String",
    }
    assert message_attributes(ok) == {"a": {"DataType": "String"}}  # no value: the caller says


@pytest.mark.parametrize("name", ["a.b", "a b", "", "ü"])
def test_topic_names_sns_refuses(node: NodeProcess, name: str) -> None:
    sns = _client(node, "sns")
    with pytest.raises(ClientError) as refused:
        sns.create_topic(Name=name)
    assert refused.value.response["Error"]["Code"] == "InvalidParameter"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
