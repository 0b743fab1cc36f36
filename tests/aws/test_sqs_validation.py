"""SQS input rules as AWS enforces them, and a receive that never fails on what
another API stored: unmodified boto3 (and raw JSON where boto3 would refuse to
send) against a real node process."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from dynaq.api.aws.sqs_wire import from_dynaq_attributes
from dynaq.core.messages import TYPES_ATTRIBUTE
from dynaq.testing.process import NodeProcess, node_process


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    p = node_process(tmp_path_factory.mktemp("sqs-validation"))
    p.start()
    try:
        yield p
    finally:
        p.kill()


@pytest.fixture(scope="module")
def sqs(node: NodeProcess) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=node.url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1}, parameter_validation=False),
    )


def _raw(node: NodeProcess, action: str, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """An SQS call as JSON (what boto3 would not send), answered status and body."""
    req = urllib.request.Request(
        node.url + "/",
        data=json.dumps(payload).encode(),
        headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "AmazonSQS." + action,
        },
    )
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def _code(node: NodeProcess, action: str, payload: dict[str, Any]) -> str:
    status, body = _raw(node, action, payload)
    assert status == 400, (action, payload, status, body)
    return str(body["__type"]).rsplit("#", 1)[-1]


def _v2(node: NodeProcess, queue: str, messages: list[dict[str, Any]]) -> int:
    req = urllib.request.Request(
        f"{node.url}/v2/queues/{queue}/messages",
        data=json.dumps({"messages": messages}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


_BAD_TYPES = [
    {TYPES_ATTRIBUTE: '{"x": "Binary"}', "x": "not-base64!"},
    {TYPES_ATTRIBUTE: "not json", "x": "1"},
    {TYPES_ATTRIBUTE: "[1, 2]", "x": "1"},
    {TYPES_ATTRIBUTE: '"Binary"', "x": "1"},
    {TYPES_ATTRIBUTE: '{"x": 5}', "x": "1"},
    {TYPES_ATTRIBUTE: '{"x": ["Binary"]}', "x": "1"},
    {TYPES_ATTRIBUTE: '{"x": "Weird"}', "x": "1"},
    {TYPES_ATTRIBUTE: '{"x": "Number"}', "x": "not a number"},
    {TYPES_ATTRIBUTE: "[" * 100_000, "x": "1"},
]


@pytest.mark.parametrize("attrs", _BAD_TYPES)
def test_stored_types_that_do_not_decode_come_back_as_strings(attrs: dict[str, str]) -> None:
    [(name, got)] = from_dynaq_attributes(attrs, ["All"]).items()
    assert name == "x" and got == {"DataType": "String", "StringValue": attrs["x"]}


def test_a_receive_never_fails_on_one_message_s_attributes(sqs: Any, node: NodeProcess) -> None:
    """Malformed type records sent through v2 are refused there (422) or, if taken,
    come back through SQS as plain strings: every message of the receive is returned."""
    url = sqs.create_queue(QueueName="tolerant")["QueueUrl"]
    sent = (
        ["ok-0", "ok-1"]
        if _v2(node, "tolerant", [{"body": "ok-0"}, {"body": "ok-1"}]) == 200
        else []
    )
    for i, attrs in enumerate(_BAD_TYPES[:-1]):
        status = _v2(node, "tolerant", [{"body": f"odd-{i}", "attributes": attrs}])
        assert status in (200, 201, 422), status
        if status < 300:
            sent.append(f"odd-{i}")
    assert "odd-7" in sent  # a Number that is not a number is taken by v2
    got: list[dict[str, Any]] = []
    for _ in range(5):
        r = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            VisibilityTimeout=30,
        )
        got += r.get("Messages", [])
        if len(got) >= len(sent):
            break
    assert sorted(m["Body"] for m in got) == sorted(sent)
    [odd] = [m for m in got if m["Body"] == "odd-7"]
    assert odd["MessageAttributes"]["x"] == {"DataType": "String", "StringValue": "not a number"}


def test_queue_attributes_are_integers_in_range(sqs: Any, node: NodeProcess) -> None:
    dlq = sqs.create_queue(QueueName="v-dlq")["QueueUrl"]
    arn = "arn:aws:sqs:us-east-1:000000000000:v-dlq"
    url = sqs.create_queue(QueueName="v-src")["QueueUrl"]
    for count in ("1e999", "NaN", "5.5", "true", '"5.5"', "0", "1001", '"x"', "-1"):
        rp = f'{{"deadLetterTargetArn":"{arn}","maxReceiveCount":{count}}}'
        for payload in (
            {"QueueUrl": url, "Attributes": {"RedrivePolicy": rp}},
            {"QueueName": "v-new", "Attributes": {"RedrivePolicy": rp}},
        ):
            action = "SetQueueAttributes" if "QueueUrl" in payload else "CreateQueue"
            assert _code(node, action, payload) == "InvalidAttributeValue", count
    sqs.set_queue_attributes(
        QueueUrl=url,
        Attributes={
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "5"})
        },
    )
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"]
    assert json.loads(got["RedrivePolicy"])["maxReceiveCount"] == 5
    for name in (
        "VisibilityTimeout",
        "DelaySeconds",
        "MaximumMessageSize",
        "MessageRetentionPeriod",
    ):
        for value in ("1e3", " 5", "0.25", "\u0663", "", "99999999999999999999999", "inf"):
            payload = {"QueueUrl": url, "Attributes": {name: value}}
            assert _code(node, "SetQueueAttributes", payload) == "InvalidAttributeValue", (
                name,
                value,
            )
        assert _code(node, "SetQueueAttributes", {"QueueUrl": url, "Attributes": {name: True}}) == (
            "InvalidAttributeValue"
        )
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"MessageRetentionPeriod": "1209600"})
    for bad in (0, 1001, True, 1.5, "5"):
        assert _code(node, "ListQueues", {"MaxResults": bad}) == "InvalidParameterValue"
        payload = {"QueueUrl": dlq, "MaxResults": bad}
        assert _code(node, "ListDeadLetterSourceQueues", payload) == "InvalidParameterValue"
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq, MaxResults=1)["queueUrls"] == [url]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["MessageRetentionPeriod"] == "1209600"


def test_fractional_settings_read_back_as_whole_seconds(sqs: Any, node: NodeProcess) -> None:
    req = urllib.request.Request(f"{node.url}/v1/queues/fractions", method="PUT")
    urllib.request.urlopen(req).close()
    patch = json.dumps({"visibility_timeout": 1e-300, "delay_s": 0.5}).encode()
    req = urllib.request.Request(
        f"{node.url}/v1/queues/fractions",
        data=patch,
        method="PATCH",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(req).close()
    url = sqs.get_queue_url(QueueName="fractions")["QueueUrl"]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attrs["VisibilityTimeout"], attrs["DelaySeconds"]) == ("0", "1")
    # the node takes at most 256 KiB: that is the queue's effective limit
    assert attrs["MaximumMessageSize"] == "262144"


def test_message_attributes_aws_refuses(sqs: Any, node: NodeProcess) -> None:
    url = sqs.create_queue(QueueName="attrs")["QueueUrl"]

    def send(**extra: Any) -> str:
        return _code(node, "SendMessage", {"QueueUrl": url, "MessageBody": "x", **extra})

    def attr(name: str = "a", dt: str = "String", **value: Any) -> dict[str, Any]:
        return {"MessageAttributes": {name: {"DataType": dt, **(value or {"StringValue": "v"})}}}

    bad = [
        attr(StringValue="\x00"), attr(StringValue="a\ufffeb"), attr(StringValue=""), attr(BinaryValue="eA=="),
        attr(dt="Number", StringValue="NaN"), attr(dt="Number", StringValue="Infinity"),
        attr(dt="Number", StringValue="1e999"), attr(dt="Number", StringValue="1" * 500),
        attr(dt="Number", StringValue="1" * 39), attr(dt="Number", StringValue="\u0663"),
        attr(dt="Number", StringValue=" 5"), attr(dt="Number", StringValue="1_000"),
        attr(name="AWS.x"), attr(name="amazon.x"), attr(name="a..b"), attr(name=".a"),
        attr(name="a."), attr(name="a" * 257), attr(name="a b"), attr(name="é"),
        attr(dt="String."), attr(dt="Strung"), attr(dt="String." + "x" * 250),
        attr(dt="Binary", BinaryValue="***"),
        {"MessageSystemAttributes": {"Foo": {"DataType": "String", "StringValue": "x"}}},
        {"MessageSystemAttributes": "x"}, {"DelaySeconds": True}, {"DelaySeconds": 1.5},
    ]  # fmt: skip
    for extra in bad:
        assert send(**extra) == "InvalidParameterValue", extra
    assert (
        _code(node, "SendMessage", {"QueueUrl": url, "MessageBody": 5}) == "InvalidParameterValue"
    )
    good = {
        "n": {"DataType": "Number", "StringValue": "-1.5e10"},
        "big": {"DataType": "Number", "StringValue": "9" * 38},
        "b.c_d-e": {"DataType": "Binary.png", "BinaryValue": b"\x00\x01"},
        "s": {"DataType": "String.custom", "StringValue": "ok \t\U0001f600"},
    }
    sqs.send_message(
        QueueUrl=url,
        MessageBody="x",
        MessageAttributes=good,
        MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1"}},
    )
    [m] = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"]
    assert m["MessageAttributes"] == good


def test_batches_fail_per_entry_and_as_a_whole_when_too_long(sqs: Any, node: NodeProcess) -> None:
    url = sqs.create_queue(QueueName="v.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    entries = [
        {"Id": "ok", "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "d1"},
        {
            "Id": "group",
            "MessageBody": "x",
            "MessageGroupId": "g" * 200,
            "MessageDeduplicationId": "d2",
        },
        {"Id": "dedup", "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "d é"},
        {
            "Id": "space",
            "MessageBody": "x",
            "MessageGroupId": "a b",
            "MessageDeduplicationId": "d3",
        },
    ]
    r = sqs.send_message_batch(QueueUrl=url, Entries=entries)
    assert [s["Id"] for s in r["Successful"]] == ["ok"]
    assert {f["Id"]: f["Code"] for f in r["Failed"]} == dict.fromkeys(
        ("group", "dedup", "space"), "InvalidParameterValue"
    )
    std = sqs.create_queue(QueueName="v-std")["QueueUrl"]
    big = [{"Id": str(i), "MessageBody": "a" * 30_000} for i in range(9)]
    with pytest.raises(ClientError) as err:
        sqs.send_message_batch(QueueUrl=std, Entries=big)
    assert err.value.response["Error"]["Code"] in (
        "BatchRequestTooLong",
        "AWS.SimpleQueueService.BatchRequestTooLong",
    )
    attrs = {"a": {"DataType": "String", "StringValue": "v" * 20_000}}
    near = [
        {"Id": str(i), "MessageBody": "a" * 10_000, "MessageAttributes": attrs} for i in range(9)
    ]
    with pytest.raises(ClientError):  # bodies alone fit; with their attributes they do not
        sqs.send_message_batch(QueueUrl=std, Entries=near)
    assert not sqs.send_message_batch(QueueUrl=std, Entries=big[:8]).get("Failed")


def test_ids_tags_and_other_parameters(sqs: Any, node: NodeProcess) -> None:
    url = sqs.create_queue(QueueName="v-misc")["QueueUrl"]
    fifo = sqs.create_queue(QueueName="v-misc.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    for group, dedup in (("bad group", "d"), ("g", "é"), ("g" * 129, "d"), ("", "d")):
        payload = {"QueueUrl": fifo, "MessageBody": "x", "MessageGroupId": group,
                   "MessageDeduplicationId": dedup}  # fmt: skip
        assert _code(node, "SendMessage", payload) in ("InvalidParameterValue", "MissingParameter")
    payload = {"QueueUrl": url, "MessageBody": "x", "MessageGroupId": "g" * 200}
    assert _code(node, "SendMessage", payload) == "InvalidParameterValue"
    for tags in (
        {"": "v"},
        {"k" * 129: "v"},
        {"k": "v" * 257},
        {"k": 5},
        {f"k{i}": "v" for i in range(51)},
    ):
        assert _code(node, "TagQueue", {"QueueUrl": url, "Tags": tags}) == "InvalidParameterValue"
    assert (
        _code(node, "CreateQueue", {"QueueName": "v-tags", "tags": "x"}) == "InvalidParameterValue"
    )
    payload = {"QueueUrl": url, "ReceiptHandle": "fCG_XKwhIAABe--cO_AAAQ"}
    assert _code(node, "ChangeMessageVisibility", payload) == "MissingParameter"
    for names in (
        {"AttributeNames": ["Bogus"]},
        {"MessageSystemAttributeNames": ["VisibilityTimeout"]},
    ):
        assert _code(node, "ReceiveMessage", {"QueueUrl": url, **names}) == "InvalidAttributeName"
    for bad in (
        {"MaxNumberOfMessages": True},
        {"WaitTimeSeconds": 2.5},
        {"WaitTimeSeconds": 10**30},
        {"VisibilityTimeout": "5"},
    ):
        assert _code(node, "ReceiveMessage", {"QueueUrl": url, **bad}) == "InvalidParameterValue"
    r = sqs.receive_message(QueueUrl=url, AttributeNames=["SentTimestamp", "All"])
    assert "Messages" not in r


def test_move_task_rules(sqs: Any, node: NodeProcess) -> None:
    for q in ("mv-dlq", "mv-src", "mv-plain"):
        sqs.create_queue(QueueName=q)
    arn = "arn:aws:sqs:us-east-1:000000000000:"
    policy = json.dumps({"deadLetterTargetArn": arn + "mv-dlq", "maxReceiveCount": 3})
    src = sqs.get_queue_url(QueueName="mv-src")["QueueUrl"]
    sqs.set_queue_attributes(QueueUrl=src, Attributes={"RedrivePolicy": policy})
    status, body = _raw(node, "StartMessageMoveTask", {})
    assert (status, body["__type"].rsplit("#")[-1]) == (400, "MissingParameter")
    assert "SourceArn" in body["message"]
    assert (
        _code(node, "StartMessageMoveTask", {"SourceArn": arn + "mv-plain"})
        == "InvalidParameterValue"
    )
    assert (
        _code(node, "StartMessageMoveTask", {"SourceArn": arn + "mv-nope"})
        == "ResourceNotFoundException"
    )
    payload = {"SourceArn": arn + "mv-dlq", "MaxNumberOfMessagesPerSecond": True}
    assert _code(node, "StartMessageMoveTask", payload) == "InvalidParameterValue"
    dlq = sqs.get_queue_url(QueueName="mv-dlq")["QueueUrl"]
    entries = [{"Id": str(i), "MessageBody": "m"} for i in range(10)]
    sqs.send_message_batch(QueueUrl=dlq, Entries=entries)
    start = {
        "SourceArn": arn + "mv-dlq",
        "DestinationArn": arn + "mv-plain",
        "MaxNumberOfMessagesPerSecond": 1,
    }
    handle = sqs.start_message_move_task(**start)["TaskHandle"]
    try:
        assert _code(node, "StartMessageMoveTask", start) == "InvalidParameterValue"
    finally:
        sqs.cancel_message_move_task(TaskHandle=handle)


@pytest.mark.parametrize(
    ("name", "attributes"),
    [
        ("a.b", {}),
        ("a b", {}),
        ("x" * 81, {}),
        ("", {}),
        ("a.b.fifo", {"FifoQueue": "true"}),
        ("x" * 76 + ".fifo", {"FifoQueue": "true"}),
        ("plain.fifo", {}),
    ],
)
def test_queue_names_sqs_refuses(sqs: Any, name: str, attributes: dict[str, str]) -> None:
    """SQS names are letters, digits, ``-`` and ``_`` (a FIFO queue's then ``.fifo``),
    1 to 80 in all; dynaq's own APIs also take dots, SQS's CreateQueue does not."""
    with pytest.raises(ClientError) as refused:
        sqs.create_queue(QueueName=name, Attributes=attributes)
    assert refused.value.response["Error"]["Code"] in (
        "InvalidParameterValue",
        "MissingParameter",
    )
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_queue_names_sqs_takes(sqs: Any, node: NodeProcess) -> None:
    for name, attributes in (
        ("Ab-9_z", {}),
        ("x" * 80, {}),
        ("x" * 75 + ".fifo", {"FifoQueue": "true"}),
    ):
        url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        assert url.endswith("/" + name)
    # A queue created with a dot through dynaq's own API stays reachable through SQS.
    req = urllib.request.Request(node.url + "/v1/queues/made.by.v1", method="PUT", data=b"")
    urllib.request.urlopen(req, timeout=10).close()
    url = sqs.get_queue_url(QueueName="made.by.v1")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x")
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=url)["Messages"]] == ["x"]
