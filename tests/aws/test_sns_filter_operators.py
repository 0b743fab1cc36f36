"""SNS filter-policy operators beyond exact/prefix/numeric/exists/anything-but --
suffix, equals-ignore-case, anything-but suffix, cidr, ``$or``, JSON literals on
bodies -- and SNS's key, combination and number limits, driven by unmodified
boto3 against a real node."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from dynaq.testing.process import NodeProcess, node_process
from tests.aws.test_sns import KEYS, TOKENS, _client, _queue_arn


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    env = {"DYNAQ_AUTH_TOKENS": TOKENS, "DYNAQ_AWS_KEYS": KEYS}
    p = node_process(tmp_path_factory.mktemp("sns-operators"), env=env)
    p.start()
    try:
        yield p
    finally:
        p.kill()


def _subscribe(node: NodeProcess, topic: str, queue: str, policy: object, scope: str) -> str:
    sns, sqs = _client(node, "sns"), _client(node, "sqs")
    url: str = sqs.create_queue(QueueName=queue)["QueueUrl"]
    attrs = {
        "FilterPolicy": json.dumps(policy),
        "FilterPolicyScope": scope,
        "RawMessageDelivery": "true",
    }
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=_queue_arn(sqs, url), Attributes=attrs)
    return url


def _bodies(node: NodeProcess, url: str) -> list[str]:
    sqs = _client(node, "sqs")
    out: list[str] = []
    for _ in range(3):
        r = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        out += [m["Body"] for m in r.get("Messages", [])]
    return sorted(out)


def _string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


ATTRIBUTE_POLICIES: dict[str, Any] = {
    "suffix": {"c": [{"suffix": "ed"}]},
    "ignore-case": {"c": [{"equals-ignore-case": "RED"}]},
    "not-ed": {"c": [{"anything-but": {"suffix": "ed"}}]},
    "either": {"$or": [{"c": ["red"]}, {"n": [{"numeric": [">", 10]}]}]},
    "subnet": {"ip": [{"cidr": "10.0.0.0/24"}]},
    "subnet6": {"ip": [{"cidr": "2001:db8::/32"}]},
}


def test_attribute_operators_route_as_sns_routes(node: NodeProcess) -> None:
    sns = _client(node, "sns")
    topic = sns.create_topic(Name="operators")["TopicArn"]
    urls = {
        name: _subscribe(node, topic, f"op-{name}", policy, "MessageAttributes")
        for name, policy in ATTRIBUTE_POLICIES.items()
    }
    publishes: dict[str, dict[str, Any]] = {
        "red": {"c": _string("red")},
        "RED": {"c": _string("RED")},
        "blue-11": {"c": _string("blue"), "n": {"DataType": "Number", "StringValue": "11"}},
        "blue-10": {"c": _string("blue"), "n": {"DataType": "Number", "StringValue": "10"}},
        "in-v4": {"ip": _string("10.0.0.42")},
        "out-v4": {"ip": _string("10.0.1.42")},
        "in-v6": {"ip": _string("2001:db8::7")},
    }
    for body, attrs in publishes.items():
        sns.publish(TopicArn=topic, Message=body, MessageAttributes=attrs)
    got = {name: _bodies(node, url) for name, url in urls.items()}
    assert got == {
        "suffix": ["red"],
        "ignore-case": ["RED", "red"],
        "not-ed": ["RED", "blue-10", "blue-11"],
        "either": ["blue-11", "red"],
        "subnet": ["in-v4"],
        "subnet6": ["in-v6"],
    }


def test_body_policies_take_json_literals_and_or(node: NodeProcess) -> None:
    sns = _client(node, "sns")
    topic = sns.create_topic(Name="body-operators")["TopicArn"]
    urls = {
        "flag": _subscribe(node, topic, "body-flag", {"flag": [True]}, "MessageBody"),
        "null": _subscribe(node, topic, "body-null", {"flag": [None]}, "MessageBody"),
        "suffix": _subscribe(
            node, topic, "body-suffix", {"o": {"c": [{"suffix": "ed"}]}}, "MessageBody"
        ),
    }
    for doc in ({"flag": True}, {"flag": "true"}, {"flag": None}, {"o": {"c": "red"}}):
        sns.publish(TopicArn=topic, Message=json.dumps(doc))
    got = {name: [json.loads(b) for b in _bodies(node, url)] for name, url in urls.items()}
    assert got == {
        "flag": [{"flag": True}],
        "null": [{"flag": None}],
        "suffix": [{"o": {"c": "red"}}],
    }


@pytest.mark.parametrize(
    ("policy", "words"),
    [
        ({f"k{i}": ["v"] for i in range(6)}, "filter_policy has 6 keys"),
        ({"a": ["v"] * 151}, "151 combinations"),
        ({"a": [{"numeric": [">", 2_000_000_000]}]}, "numeric > 2000000000 is outside"),
        ({"a": [1.123456]}, "more than 5 digits after the decimal point"),
        ({"a": [{"anything-but": {"equals-ignore-case": "x"}}]}, '"anything-but" object is'),
        ({"ip": [{"cidr": "10.0.0.1"}]}, '"cidr" takes an address block'),
    ],
)
def test_policies_past_sns_limits_are_invalid_parameters(
    node: NodeProcess, policy: object, words: str
) -> None:
    sns, sqs = _client(node, "sns"), _client(node, "sqs")
    topic = sns.create_topic(Name="limits")["TopicArn"]
    qarn = _queue_arn(sqs, sqs.create_queue(QueueName="limits-q")["QueueUrl"])
    with pytest.raises(ClientError) as exc:
        sns.subscribe(
            TopicArn=topic, Protocol="sqs", Endpoint=qarn,
            Attributes={"FilterPolicy": json.dumps(policy)},
        )  # fmt: skip
    error = exc.value.response["Error"]
    assert error["Code"] == "InvalidParameter" and words in error["Message"], error
