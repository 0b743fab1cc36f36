"""boto3 against a 3-node ring on Cassandra, every call through HAProxy: queue URLs,
long polls, receipt handles and FIFO order hold whichever node answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from dynaq.testing.cluster import HaproxyProcess, LocalCluster
from dynaq.testing.servers.cassandra import CassandraServer
from tests.fixtures.ring import ring_behind_haproxy


@pytest.fixture
def ring(
    tmp_path: Path, cassandra: CassandraServer
) -> Iterator[tuple[LocalCluster, HaproxyProcess]]:
    with ring_behind_haproxy(tmp_path, cassandra, sync_interval_s=0.5) as ring:
        yield ring


def _client(url: str) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="anything",
        aws_secret_access_key="anything",  # the ring has no keys: unsigned use is allowed
        config=Config(retries={"max_attempts": 3, "mode": "standard"}),
    )


def _wait_known(clients: list[Any], name: str) -> None:
    deadline = time.monotonic() + 10
    for c in clients:
        while True:
            try:
                c.get_queue_url(QueueName=name)
                break
            except c.exceptions.QueueDoesNotExist:
                assert time.monotonic() < deadline, f"{name} never reached every node"
                time.sleep(0.1)


def test_sqs_through_haproxy_on_a_ring(ring: tuple[LocalCluster, HaproxyProcess]) -> None:
    cluster, lb = ring
    sqs = _client(lb.url)
    direct = [_client(n.url) for n in cluster.nodes]
    url = sqs.create_queue(QueueName="work", Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
    assert url == f"{lb.url}/000000000000/work"  # the address the client used
    _wait_known(direct, "work")
    sent = set()
    for i in range(0, 60, 10):
        out = sqs.send_message_batch(
            QueueUrl=url,
            Entries=[{"Id": str(j), "MessageBody": f"m{i + j}"} for j in range(10)],
        )
        assert not out.get("Failed")
        sent |= {f"m{i + j}" for j in range(10)}
    got: set[str] = set()
    deadline = time.monotonic() + 30
    while got != sent and time.monotonic() < deadline:
        r = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=2)
        msgs = r.get("Messages", [])
        got |= {m["Body"] for m in msgs}
        if msgs:  # receipts from any node's delivery delete through the balancer
            d = sqs.delete_message_batch(
                QueueUrl=url,
                Entries=[
                    {"Id": str(k), "ReceiptHandle": m["ReceiptHandle"]} for k, m in enumerate(msgs)
                ],
            )
            assert not d.get("Failed"), d
    assert got == sent
    # a long poll at any node returns a message sent through another
    for c in direct:
        started = time.monotonic()
        sqs.send_message(QueueUrl=url, MessageBody="lp")
        [m] = c.receive_message(QueueUrl=url, WaitTimeSeconds=10)["Messages"]
        assert m["Body"] == "lp" and time.monotonic() - started < 5
        # and its receipt works through yet another node
        direct[(direct.index(c) + 1) % 3].delete_message(
            QueueUrl=url, ReceiptHandle=m["ReceiptHandle"]
        )
    # FIFO order through the balancer
    fifo = sqs.create_queue(
        QueueName="jobs.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )["QueueUrl"]
    _wait_known(direct, "jobs.fifo")
    for i in range(5):
        sqs.send_message(QueueUrl=fifo, MessageBody=f"f{i}", MessageGroupId="g")
    order: list[str] = []
    deadline = time.monotonic() + 30
    while len(order) < 5 and time.monotonic() < deadline:
        for m in sqs.receive_message(QueueUrl=fifo, WaitTimeSeconds=2).get("Messages", []):
            order.append(m["Body"])
            sqs.delete_message(QueueUrl=fifo, ReceiptHandle=m["ReceiptHandle"])
    assert order == [f"f{i}" for i in range(5)]
    time.sleep(5.5)  # every node's statistics refresh
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["ApproximateNumberOfMessages"] == "0"


def test_dead_letters_deduplication_and_the_aws_cli_through_haproxy(
    ring: tuple[LocalCluster, HaproxyProcess],
) -> None:
    cluster, lb = ring
    sqs = _client(lb.url)
    direct = [_client(n.url) for n in cluster.nodes]
    dlq = sqs.create_queue(QueueName="poison-dlq")["QueueUrl"]
    _wait_known(direct, "poison-dlq")
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    policy = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 2})
    src = sqs.create_queue(QueueName="poison", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    _wait_known(direct, "poison")
    sqs.send_message(QueueUrl=src, MessageBody="bad")
    receives = 0
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:  # never deleted: received twice, then dead-lettered
        got = sqs.receive_message(QueueUrl=src, VisibilityTimeout=1, WaitTimeSeconds=2)
        receives += len(got.get("Messages", []))
        dead = sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=1, VisibilityTimeout=0)
        if dead.get("Messages"):
            break
    assert dead["Messages"][0]["Body"] == "bad" and receives == 2
    task = sqs.start_message_move_task(SourceArn=dlq_arn)["TaskHandle"]
    deadline = time.monotonic() + 30
    back: list[dict[str, Any]] = []
    while not back and time.monotonic() < deadline:
        back = sqs.receive_message(QueueUrl=src, WaitTimeSeconds=2).get("Messages", [])
    assert [m["Body"] for m in back] == ["bad"] and task
    # FIFO deduplication holds whichever node takes each send
    fifo = sqs.create_queue(QueueName="once.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    _wait_known(direct, "once.fifo")
    for c in direct:
        c.send_message(QueueUrl=fifo, MessageBody="pay", MessageGroupId="g",
                       MessageDeduplicationId="invoice-7")  # fmt: skip
    got_once: list[str] = []
    for _ in range(3):
        for m in sqs.receive_message(QueueUrl=fifo, WaitTimeSeconds=1).get("Messages", []):
            got_once.append(m["Body"])
            sqs.delete_message(QueueUrl=fifo, ReceiptHandle=m["ReceiptHandle"])
    assert got_once == ["pay"]
    # the aws CLI through the balancer
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
    env.update(AWS_ACCESS_KEY_ID="any", AWS_SECRET_ACCESS_KEY="any", AWS_DEFAULT_REGION="us-east-1")

    def aws(*args: str) -> Any:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "aws"), "sqs", *args, "--endpoint-url", lb.url,
             "--output", "json"],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout) if done.stdout.strip() else None

    cli_url = aws("create-queue", "--queue-name", "cli-ring")["QueueUrl"]
    _wait_known(direct, "cli-ring")
    aws("send-message", "--queue-url", cli_url, "--message-body", "via cli")
    [m] = aws("receive-message", "--queue-url", cli_url, "--wait-time-seconds", "5")["Messages"]
    assert m["Body"] == "via cli"
    aws("delete-message", "--queue-url", cli_url, "--receipt-handle", m["ReceiptHandle"])
