"""SQS's wire protocol, driven by unmodified boto3 against a real node process.

boto3 signs every request (SigV4) and verifies every MD5 the node returns, so
a digest computed differently from AWS's fails the call itself.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from dynaq.testing.process import NodeProcess, node_process

ADMIN_TOKEN = "sqs-admin-0123456789"
READ_TOKEN = "sqs-reader-0123456789"
TEAM_TOKEN = "sqs-team-0123456789"
TOKENS = (
    f"ops:{ADMIN_TOKEN}:admin=*,reader:{READ_TOKEN}:read=*,team:{TEAM_TOKEN}:admin=queue/team-*"
)
KEYS = "AKIDADMIN:admin-secret:ops,AKIDREAD:read-secret:reader,AKIDTEAM:team-secret:team"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    env = {"DYNAQ_AUTH_TOKENS": TOKENS, "DYNAQ_AWS_KEYS": KEYS}
    p = node_process(tmp_path_factory.mktemp("sqs"), env=env)
    p.start()
    try:
        yield p
    finally:
        p.kill()


def _client(node: NodeProcess, key: str = "AKIDADMIN", secret: str = "admin-secret") -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=node.url,
        region_name="us-east-1",
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1}),
    )


@pytest.fixture
def sqs(node: NodeProcess) -> Any:
    return _client(node)


def _code(exc: ClientError) -> str:
    return str(exc.response["Error"]["Code"])


def test_queue_lifecycle_attributes_and_tags(sqs: Any, node: NodeProcess) -> None:
    url = sqs.create_queue(
        QueueName="life",
        Attributes={
            "VisibilityTimeout": "45",
            "DelaySeconds": "2",
            "MessageRetentionPeriod": "3600",
        },
        tags={"team": "core"},
    )["QueueUrl"]
    assert url == f"{node.url}/000000000000/life"
    # the same attributes: the same queue; others: QueueNameExists
    assert (
        sqs.create_queue(QueueName="life", Attributes={"VisibilityTimeout": "45"})["QueueUrl"]
        == url
    )
    with pytest.raises(sqs.exceptions.QueueNameExists):
        sqs.create_queue(QueueName="life", Attributes={"VisibilityTimeout": "46"})
    assert sqs.get_queue_url(QueueName="life")["QueueUrl"] == url
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["VisibilityTimeout"] == "45" and attrs["DelaySeconds"] == "2"
    assert attrs["MessageRetentionPeriod"] == "3600"
    assert attrs["QueueArn"] == "arn:aws:sqs:us-east-1:000000000000:life"
    assert attrs["ApproximateNumberOfMessages"] == "0"
    sqs.set_queue_attributes(
        QueueUrl=url,
        Attributes={"ReceiveMessageWaitTimeSeconds": "1", "MaximumMessageSize": "2048"},
    )
    got = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ReceiveMessageWaitTimeSeconds", "MaximumMessageSize"]
    )["Attributes"]
    assert got == {"ReceiveMessageWaitTimeSeconds": "1", "MaximumMessageSize": "2048"}
    # the same settings through dynaq's own API: one model
    with urllib.request.urlopen(
        urllib.request.Request(
            f"{node.url}/v2/queues/life", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
        )
    ) as r:
        desc = json.loads(r.read())
    assert (desc["visibility_timeout_s"], desc["receive_wait_s"], desc["max_message_bytes"]) == (
        45,
        1,
        2048,
    )
    assert desc["tags"] == {"team": "core"}
    sqs.tag_queue(QueueUrl=url, Tags={"env": "test"})
    sqs.untag_queue(QueueUrl=url, TagKeys=["team"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"env": "test"}
    with pytest.raises(ClientError) as bad:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "50000"})
    assert _code(bad.value) == "InvalidAttributeValue"
    with pytest.raises(ClientError) as bad:
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Nonsense"])
    assert _code(bad.value) == "InvalidAttributeName"
    sqs.delete_queue(QueueUrl=url)
    with pytest.raises(sqs.exceptions.QueueDoesNotExist) as gone:
        sqs.get_queue_url(QueueName="life")
    assert _code(gone.value) == "AWS.SimpleQueueService.NonExistentQueue"


def test_list_queues_with_prefix_and_pages(sqs: Any) -> None:
    for i in range(5):
        sqs.create_queue(QueueName=f"page-{i}")
    first = sqs.list_queues(QueueNamePrefix="page-", MaxResults=3)
    assert [u.rsplit("/", 1)[1] for u in first["QueueUrls"]] == ["page-0", "page-1", "page-2"]
    rest = sqs.list_queues(QueueNamePrefix="page-", MaxResults=3, NextToken=first["NextToken"])
    assert [u.rsplit("/", 1)[1] for u in rest["QueueUrls"]] == ["page-3", "page-4"]
    assert "NextToken" not in rest


def test_messages_with_typed_attributes_and_digests(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="msgs")["QueueUrl"]
    attributes = {
        "kind": {"DataType": "String", "StringValue": "order"},
        "amount": {"DataType": "Number", "StringValue": "12.5"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
        "custom": {"DataType": "String.uuid", "StringValue": "3f0c"},
    }
    sent = sqs.send_message(QueueUrl=url, MessageBody="héllo", MessageAttributes=attributes)
    # boto3 has checked MD5OfMessageBody and MD5OfMessageAttributes already
    got = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["All"],
    )["Messages"]
    [m] = got
    assert m["MessageId"] == sent["MessageId"] and m["Body"] == "héllo"
    assert m["MessageAttributes"] == attributes
    assert m["Attributes"]["ApproximateReceiveCount"] == "1"
    assert int(m["Attributes"]["SentTimestamp"]) > 1_700_000_000_000
    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    with pytest.raises(sqs.exceptions.ReceiptHandleIsInvalid):
        sqs.delete_message(QueueUrl=url, ReceiptHandle="not-a-handle")


def test_batches_report_errors_per_entry(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="batch")["QueueUrl"]
    out = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "MessageBody": "one"},
            {"Id": "b", "MessageBody": "two", "DelaySeconds": 901},
            {"Id": "c", "MessageBody": "three"},
        ],
    )
    assert sorted(s["Id"] for s in out["Successful"]) == ["a", "c"]
    [failed] = out["Failed"]
    assert (
        failed["Id"] == "b" and failed["Code"] == "InvalidParameterValue" and failed["SenderFault"]
    )
    with pytest.raises(sqs.exceptions.TooManyEntriesInBatchRequest):
        sqs.send_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(11)]
        )
    with pytest.raises(sqs.exceptions.BatchEntryIdsNotDistinct):
        sqs.send_message_batch(
            QueueUrl=url, Entries=[{"Id": "x", "MessageBody": "1"}, {"Id": "x", "MessageBody": "2"}]
        )
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in got) == ["one", "three"]
    deleted = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[{"Id": f"d{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
        + [{"Id": "bad", "ReceiptHandle": "garbage"}],
    )
    assert len(deleted["Successful"]) == 2
    assert [(f["Id"], f["Code"]) for f in deleted["Failed"]] == [("bad", "ReceiptHandleIsInvalid")]


def test_a_standard_queue_refuses_deduplication_ids_as_aws_does(sqs: Any) -> None:
    """AWS answers InvalidParameterValue; accepting the id and ignoring it would let a
    sender believe its retries are deduplicated. A MessageGroupId is accepted (AWS's
    fair queues) and nothing is left behind by the refused sends."""
    url = sqs.create_queue(QueueName="plain-dedup")["QueueUrl"]
    with pytest.raises(ClientError) as err:
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageDeduplicationId="once")
    assert _code(err.value) == "InvalidParameterValue"
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert "MessageDeduplicationId" in err.value.response["Error"]["Message"]
    out = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "MessageBody": "kept", "MessageGroupId": "tenant-1"},
            {"Id": "b", "MessageBody": "refused", "MessageDeduplicationId": "once"},
        ],
    )
    assert [s["Id"] for s in out["Successful"]] == ["a"]
    assert [(f["Id"], f["Code"], f["SenderFault"]) for f in out["Failed"]] == [
        ("b", "InvalidParameterValue", True)
    ]
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    assert [m["Body"] for m in got["Messages"]] == ["kept"]


def test_bodies_outside_sqs_characters_are_refused_with_its_codes(sqs: Any) -> None:
    """SQS's allowed characters (XML's): a NUL or another control character is
    InvalidMessageContents, per entry in a batch; a lone surrogate, which no UTF-8
    store can hold, is a SerializationException. Each a 400, never a 500."""
    url = sqs.create_queue(QueueName="contents")["QueueUrl"]
    for body, code in [
        ("a\x00b", "InvalidMessageContents"),
        ("bell\x07", "InvalidMessageContents"),
        ("\ufffe", "InvalidMessageContents"),
        ("half \ud800 pair", "SerializationException"),
    ]:
        with pytest.raises(ClientError) as err:
            sqs.send_message(QueueUrl=url, MessageBody=body)
        assert _code(err.value) == code, body
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    allowed = "tab\t nl\n cr\r \u00e9 \ud7ff \ue000 \U0001f600"
    out = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[{"Id": "ok", "MessageBody": allowed}, {"Id": "nul", "MessageBody": "\x00"}],
    )
    assert [s["Id"] for s in out["Successful"]] == ["ok"]
    assert [(f["Id"], f["Code"]) for f in out["Failed"]] == [("nul", "InvalidMessageContents")]
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    assert [m["Body"] for m in got["Messages"]] == [allowed]


def test_visibility_and_stale_receipt_handles(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="vis")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="job")
    [first] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=1)["Messages"]
    time.sleep(1.3)  # the first delivery's visibility runs out
    [second] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=30)["Messages"]
    assert second["MessageId"] == first["MessageId"]
    assert second["ReceiptHandle"] != first["ReceiptHandle"]
    # the old handle neither releases nor deletes the new delivery
    with pytest.raises(ClientError) as stale:
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0
        )
    assert _code(stale.value) == "InvalidParameterValue"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])  # a no-op, as on AWS
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=second["ReceiptHandle"], VisibilityTimeout=0
    )
    [third] = sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount"])[
        "Messages"
    ]
    assert third["MessageId"] == first["MessageId"]
    assert third["Attributes"]["ApproximateReceiveCount"] == "3"
    batch = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "new", "ReceiptHandle": third["ReceiptHandle"], "VisibilityTimeout": 60},
            {"Id": "old", "ReceiptHandle": second["ReceiptHandle"], "VisibilityTimeout": 60},
        ],
    )
    assert [s["Id"] for s in batch["Successful"]] == ["new"]
    assert [f["Id"] for f in batch["Failed"]] == ["old"]


def test_fifo_order_groups_and_content_deduplication(sqs: Any) -> None:
    with pytest.raises(ClientError):
        sqs.create_queue(QueueName="plain", Attributes={"FifoQueue": "true"})
    url = sqs.create_queue(
        QueueName="orders.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    ids = [
        sqs.send_message(QueueUrl=url, MessageBody=f"o{i}", MessageGroupId="g")["MessageId"]
        for i in range(3)
    ]
    again = sqs.send_message(QueueUrl=url, MessageBody="o1", MessageGroupId="g")
    assert again["MessageId"] == ids[1]  # deduplicated by content
    with pytest.raises(ClientError):
        sqs.send_message(QueueUrl=url, MessageBody="no group")
    seen = []
    for _ in range(3):
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"]
        assert "Messages" not in sqs.receive_message(QueueUrl=url)  # the group waits
        seen.append(got[0]["Body"])
        sqs.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    assert seen == ["o0", "o1", "o2"]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["FifoQueue"] == "true" and attrs["ContentBasedDeduplication"] == "true"


def test_dead_letters_and_a_move_task_back(sqs: Any) -> None:
    dlq = sqs.create_queue(QueueName="poison-dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 2})
    src = sqs.create_queue(QueueName="poison", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    sqs.send_message(QueueUrl=src, MessageBody="bad")
    for _ in range(2):
        assert (
            len(
                sqs.receive_message(QueueUrl=src, VisibilityTimeout=1, WaitTimeSeconds=5)[
                    "Messages"
                ]
            )
            == 1
        )
        time.sleep(1.2)
    assert "Messages" not in sqs.receive_message(QueueUrl=src, WaitTimeSeconds=1)
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [src]
    [dead] = sqs.receive_message(QueueUrl=dlq, VisibilityTimeout=0)["Messages"]
    assert dead["Body"] == "bad"
    time.sleep(0.1)
    handle = sqs.start_message_move_task(SourceArn=arn)["TaskHandle"]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        [task] = sqs.list_message_move_tasks(SourceArn=arn)["Results"]
        if task["Status"] != "RUNNING":
            break
        time.sleep(0.2)
    assert task["TaskHandle"] == handle and task["Status"] == "COMPLETED"
    assert task["ApproximateNumberOfMessagesMoved"] == 1
    [back] = sqs.receive_message(QueueUrl=src, WaitTimeSeconds=5)["Messages"]
    assert back["Body"] == "bad"


def test_a_move_task_is_cancelled_and_keeps_what_it_moved(sqs: Any) -> None:
    """CancelMessageMoveTask: the task stops before its next page (at once: it runs on
    this node), what it moved stays moved; a finished or unknown task is
    ResourceNotFoundException, as on SQS."""
    arns = {}
    urls = {}
    for q in ("cancel-dlq", "cancel-dest"):
        urls[q] = sqs.create_queue(QueueName=q)["QueueUrl"]
        arns[q] = sqs.get_queue_attributes(QueueUrl=urls[q], AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
    # only a dead-letter queue is a move task's source (as on SQS)
    policy = json.dumps({"deadLetterTargetArn": arns["cancel-dlq"], "maxReceiveCount": 3})
    sqs.create_queue(QueueName="cancel-src", Attributes={"RedrivePolicy": policy})
    for i in range(0, 30, 10):
        entries = [{"Id": str(j), "MessageBody": f"m{j}"} for j in range(i, i + 10)]
        assert not sqs.send_message_batch(QueueUrl=urls["cancel-dlq"], Entries=entries).get(
            "Failed"
        )
    handle = sqs.start_message_move_task(
        SourceArn=arns["cancel-dlq"], DestinationArn=arns["cancel-dest"],
        MaxNumberOfMessagesPerSecond=1,
    )["TaskHandle"]  # fmt: skip
    time.sleep(0.5)  # the first page (one message) moves; then it waits a second
    moved = sqs.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"]
    assert 0 <= moved <= 10
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        [task] = sqs.list_message_move_tasks(SourceArn=arns["cancel-dlq"])["Results"]
        if task["Status"] != "CANCELLING":
            break
        time.sleep(0.1)
    assert task["TaskHandle"] == handle and task["Status"] == "CANCELLED"
    left = sqs.get_queue_attributes(
        QueueUrl=urls["cancel-dlq"], AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]["ApproximateNumberOfMessages"]
    assert int(left) + task["ApproximateNumberOfMessagesMoved"] == 30
    assert int(left) >= 20  # stopped: at one a second the whole move takes 30 s
    for bad in (handle, "0" * 32, "not-a-handle"):
        with pytest.raises(ClientError) as gone:
            sqs.cancel_message_move_task(TaskHandle=bad)
        assert gone.value.response["Error"]["Code"] == "ResourceNotFoundException"


def test_long_poll_returns_when_a_message_arrives(sqs: Any, node: NodeProcess) -> None:
    url = sqs.create_queue(QueueName="lp")["QueueUrl"]
    other = _client(node)

    def send_later() -> None:
        time.sleep(1.0)
        other.send_message(QueueUrl=url, MessageBody="late")

    t = threading.Thread(target=send_later)
    t.start()
    started = time.monotonic()
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=10)["Messages"]
    took = time.monotonic() - started
    t.join()
    assert [m["Body"] for m in got] == ["late"] and 0.8 < took < 5


def test_one_model_under_both_apis(sqs: Any, node: NodeProcess) -> None:
    url = sqs.create_queue(QueueName="both")["QueueUrl"]
    body = json.dumps({"messages": [{"body": "from v2", "attributes": {"k": "v"}}]}).encode()
    req = urllib.request.Request(
        f"{node.url}/v2/queues/both/messages",
        data=body,
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req) as r:
        assert r.status == 200
    [m] = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"]
    assert m["Body"] == "from v2"
    assert m["MessageAttributes"] == {"k": {"DataType": "String", "StringValue": "v"}}


def test_signatures_and_grants(node: NodeProcess, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="guarded")["QueueUrl"]
    wrong = _client(node, secret="not-the-secret")
    with pytest.raises(ClientError) as bad:
        wrong.send_message(QueueUrl=url, MessageBody="x")
    assert _code(bad.value) == "SignatureDoesNotMatch"
    with pytest.raises(ClientError) as bad:
        _client(node, key="AKIDNOBODY").list_queues()
    assert _code(bad.value) == "InvalidClientTokenId"
    reader = _client(node, "AKIDREAD", "read-secret")
    assert "QueueUrls" in reader.list_queues()
    with pytest.raises(ClientError) as bad:
        reader.send_message(QueueUrl=url, MessageBody="x")
    assert _code(bad.value) == "AccessDenied"
    # unsigned: refused (this node has keys and no anonymous access)
    req = urllib.request.Request(
        f"{node.url}/",
        data=b"{}",
        headers={
            "X-Amz-Target": "AmazonSQS.ListQueues",
            "Content-Type": "application/x-amz-json-1.0",
        },
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req)
    assert refused.value.code == 403
    err = json.loads(refused.value.read())
    assert err["__type"].endswith("#MissingAuthenticationToken")


def test_a_second_purge_within_the_interval_is_purge_queue_in_progress(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="purged-twice")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="gone")
    sqs.purge_queue(QueueUrl=url)
    # botocore's modeled exception, as for SQS's own answer.
    with pytest.raises(sqs.exceptions.PurgeQueueInProgress) as again:
        sqs.purge_queue(QueueUrl=url)
    assert _code(again.value) == "AWS.SimpleQueueService.PurgeQueueInProgress"
    assert again.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert "every 60 seconds" in again.value.response["Error"]["Message"]
    # Another queue is not held by this one's purge.
    other = sqs.create_queue(QueueName="purged-once")["QueueUrl"]
    sqs.purge_queue(QueueUrl=other)
    # The first purge still ran: the message is gone.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0)
        attrs = sqs.get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        if not got.get("Messages") and attrs["ApproximateNumberOfMessages"] == "0":
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the purge did not empty the queue")


def test_purge_interval_is_configurable_and_ends(tmp_path: Path) -> None:
    env = {"DYNAQ_AWS_PURGE_INTERVAL_S": "1.5"}
    p = node_process(tmp_path, env=env).start()
    try:
        client = boto3.client(
            "sqs",
            endpoint_url=p.url,
            region_name="us-east-1",
            aws_access_key_id="any",
            aws_secret_access_key="any",
            config=Config(retries={"max_attempts": 1}),
        )
        url = client.create_queue(QueueName="purged")["QueueUrl"]
        client.purge_queue(QueueUrl=url)
        with pytest.raises(ClientError) as again:
            client.purge_queue(QueueUrl=url)
        assert "every 1.5 seconds" in again.value.response["Error"]["Message"]
        time.sleep(1.6)
        client.purge_queue(QueueUrl=url)  # the interval has passed
    finally:
        p.kill()


def test_last_modified_moves_with_set_queue_attributes_only(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="stamps")["QueueUrl"]
    names = ["CreatedTimestamp", "LastModifiedTimestamp"]
    first = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    assert first["LastModifiedTimestamp"] == first["CreatedTimestamp"]
    time.sleep(1.1)  # the timestamps are whole seconds
    sqs.send_message(QueueUrl=url, MessageBody="not a change of the queue")
    same = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    assert same == first
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "40"})
    then = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    assert then["CreatedTimestamp"] == first["CreatedTimestamp"]
    assert int(then["LastModifiedTimestamp"]) > int(first["LastModifiedTimestamp"])
    sqs.delete_queue(QueueUrl=url)


def test_a_fifo_receive_retried_with_its_attempt_id_gets_the_same_messages(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="attempts.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    for i in range(3):
        sqs.send_message(
            QueueUrl=url,
            MessageBody=f"m{i}",
            MessageGroupId=f"g{i}",
            MessageDeduplicationId=f"d{i}",
        )

    def receive(attempt: str, n: int = 2) -> list[dict[str, Any]]:
        got = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=n,
            VisibilityTimeout=30,
            ReceiveRequestAttemptId=attempt,
        )
        return list(got.get("Messages", []))

    first = receive("attempt-1")
    assert len(first) == 2
    # The answer was "lost": the retry gets the same messages and receipts, not
    # the third message, and the two are not left invisible for 30 s.
    again = receive("attempt-1")
    assert [(m["MessageId"], m["ReceiptHandle"]) for m in again] == [
        (m["MessageId"], m["ReceiptHandle"]) for m in first
    ]
    other = receive("attempt-2", 10)
    assert sorted(m["Body"] for m in first + other) == ["m0", "m1", "m2"]
    # Once one of them is deleted the attempt id no longer replays: a new receive.
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"])
    assert receive("attempt-1") == []
    with pytest.raises(ClientError) as bad:
        receive("not valid: spaces")
    assert _code(bad.value) == "InvalidParameterValue"
    sqs.delete_queue(QueueUrl=url)


def test_approximate_first_receive_timestamp_is_the_first_receive(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="first-receive", Attributes={"VisibilityTimeout": "0"})[
        "QueueUrl"
    ]
    sqs.send_message(QueueUrl=url, MessageBody="x")
    time.sleep(1.2)
    before_ms = int(time.time() * 1000)
    seen = []
    for _ in range(2):
        (m,) = sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"]
        seen.append(m["Attributes"])
        time.sleep(0.3)
    sent = int(seen[0]["SentTimestamp"])
    first = int(seen[0]["ApproximateFirstReceiveTimestamp"])
    assert first >= before_ms - 50 and first >= sent + 1000
    # The second delivery keeps the first one's time, and counts on.
    assert seen[1]["ApproximateFirstReceiveTimestamp"] == str(first)
    assert [a["ApproximateReceiveCount"] for a in seen] == ["1", "2"]


def test_a_redrive_policy_needs_write_on_its_dead_letter_queue(sqs: Any, node: NodeProcess) -> None:
    """Naming a dead-letter queue sends messages into it: a token that is admin on its
    own queues only cannot make another team's queue its dead-letter queue."""
    vault = sqs.create_queue(QueueName="vault")["QueueUrl"]
    vault_arn = sqs.get_queue_attributes(QueueUrl=vault, AttributeNames=["QueueArn"])
    policy = {"deadLetterTargetArn": vault_arn["Attributes"]["QueueArn"], "maxReceiveCount": 1}
    team = _client(node, "AKIDTEAM", "team-secret")
    with pytest.raises(ClientError) as denied:
        team.create_queue(QueueName="team-src", Attributes={"RedrivePolicy": json.dumps(policy)})
    assert _code(denied.value) == "AccessDenied"
    assert "team-src" not in " ".join(sqs.list_queues().get("QueueUrls", []))
    own = team.create_queue(QueueName="team-dlq")["QueueUrl"]
    own_arn = team.get_queue_attributes(QueueUrl=own, AttributeNames=["QueueArn"])
    mine = {"deadLetterTargetArn": own_arn["Attributes"]["QueueArn"], "maxReceiveCount": 1}
    src = team.create_queue(QueueName="team-src", Attributes={"RedrivePolicy": json.dumps(mine)})
    with pytest.raises(ClientError) as denied:
        team.set_queue_attributes(
            QueueUrl=src["QueueUrl"], Attributes={"RedrivePolicy": json.dumps(policy)}
        )
    assert _code(denied.value) == "AccessDenied"


def test_a_dead_letter_queue_is_of_its_source_queues_type(sqs: Any) -> None:
    """As SQS: a FIFO queue's dead-letter queue is FIFO, a standard queue's standard."""
    fifo = sqs.create_queue(QueueName="dl-type.fifo", Attributes={"FifoQueue": "true"})
    plain = sqs.create_queue(QueueName="dl-type-plain")
    arns = {
        name: sqs.get_queue_attributes(QueueUrl=q["QueueUrl"], AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        for name, q in (("fifo", fifo), ("plain", plain))
    }
    with pytest.raises(ClientError) as refused:
        sqs.create_queue(
            QueueName="dl-src",
            Attributes={
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": arns["fifo"], "maxReceiveCount": 2}
                )
            },
        )
    assert "FIFO" in str(refused.value)
    with pytest.raises(ClientError):
        sqs.create_queue(
            QueueName="dl-src.fifo",
            Attributes={
                "FifoQueue": "true",
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": arns["plain"], "maxReceiveCount": 2}
                ),
            },
        )
    ok = {"deadLetterTargetArn": arns["plain"], "maxReceiveCount": 2}
    sqs.create_queue(QueueName="dl-src", Attributes={"RedrivePolicy": json.dumps(ok)})


def test_fifo_dedup_scope_per_group_is_refused_not_ignored(sqs: Any) -> None:
    """dynaq deduplicates per queue: taking DeduplicationScope=messageGroup would drop
    a message whose dedup id another group had used, each send answered 200."""
    with pytest.raises(ClientError) as refused:
        sqs.create_queue(
            QueueName="hq.fifo",
            Attributes={"FifoQueue": "true", "DeduplicationScope": "messageGroup"},
        )
    assert _code(refused.value) == "InvalidAttributeValue"
    url = sqs.create_queue(
        QueueName="hq.fifo",
        Attributes={"FifoQueue": "true", "FifoThroughputLimit": "perMessageGroupId"},
    )["QueueUrl"]
    got = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["DeduplicationScope", "FifoThroughputLimit"]
    )["Attributes"]
    assert got == {"DeduplicationScope": "queue", "FifoThroughputLimit": "perQueue"}
    with pytest.raises(ClientError) as refused:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"DeduplicationScope": "messageGroup"})
    assert _code(refused.value) == "InvalidAttributeValue"
    with pytest.raises(ClientError) as refused:
        sqs.create_queue(QueueName="hq-plain", Attributes={"DeduplicationScope": "queue"})
    assert _code(refused.value) == "InvalidAttributeName"


def test_receive_abandoned_by_its_client_takes_nothing(sqs: Any, node: NodeProcess) -> None:
    """An SDK whose read timeout is shorter than its WaitTimeSeconds hangs up and
    retries; the node's poll for the connection it closed must not take the next
    message (it would stay invisible for the whole visibility timeout)."""
    from botocore.exceptions import ReadTimeoutError

    url = sqs.create_queue(QueueName="abandoned-poll")["QueueUrl"]
    impatient = boto3.client(
        "sqs",
        endpoint_url=node.url,
        region_name="us-east-1",
        aws_access_key_id="AKIDADMIN",
        aws_secret_access_key="admin-secret",
        config=Config(retries={"max_attempts": 1}, read_timeout=0.5),
    )
    with pytest.raises(ReadTimeoutError):
        impatient.receive_message(QueueUrl=url, WaitTimeSeconds=5, VisibilityTimeout=600)
    time.sleep(0.2)
    sqs.send_message(QueueUrl=url, MessageBody="next")
    time.sleep(0.3)
    got = sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount"])
    assert [(m["Body"], m["Attributes"]["ApproximateReceiveCount"]) for m in got["Messages"]] == [
        ("next", "1")
    ]


def test_fifo_receive_returns_a_run_of_one_group_in_order(sqs: Any) -> None:
    """As SQS: one ReceiveMessage may return several messages of one group, in
    order; the group then waits until all of them are deleted or visible again."""
    url = sqs.create_queue(
        QueueName="runs.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )["QueueUrl"]
    for i in range(7):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}", MessageGroupId="g")
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=5)["Messages"]
    assert [m["Body"] for m in first] == ["m0", "m1", "m2", "m3", "m4"]
    assert "Messages" not in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(first)],
    )
    rest = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in rest] == ["m5", "m6"]
