"""Conformance against an SQS nobody here wrote: the same boto3 calls against a dynaq
node and moto's SQS server (PyPI ``moto[server]``, run in this test), compared field by
field.

Excluded from the comparison, each for a reason: ``ResponseMetadata`` (request ids,
HTTP headers), message ids and receipt handles (opaque, different by design; their
*relations are compared where the reference agrees: a deduplicated send is not delivered),
the host in queue URLs and the account in ARNs (each server's own), and timestamps.
Everything else (digests, attributes, error codes, batch results) must be equal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer

from dynaq.testing.process import NodeProcess, free_port, node_process

_TIMESTAMPS = {"SentTimestamp", "ApproximateFirstReceiveTimestamp", "CreatedTimestamp",
               "LastModifiedTimestamp"}  # fmt: skip
_OPAQUE = {"MessageId", "ReceiptHandle", "SequenceNumber", "SenderId", "ResponseMetadata"}


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
    p = node_process(tmp_path_factory.mktemp("conformance"))
    p.start()
    try:
        yield p
    finally:
        p.kill()


def _client(url: str) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1}),
    )


def _normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _normalize(v) for k, v in value.items() if k not in _OPAQUE | _TIMESTAMPS}
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    if isinstance(value, str):
        value = re.sub(r"^https?://[^/]+/\d{12}/", "URL/", value)
        return re.sub(r"arn:aws:sqs:([a-z0-9-]+):\d{12}:", r"arn:aws:sqs:\1:ACCOUNT:", value)
    return value


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        return _normalize(call())
    except ClientError as exc:
        return {"error": exc.response["Error"]["Code"]}


class Both:
    """Runs each step against dynaq and moto and records both outcomes."""

    def __init__(self, dynaq: Any, moto: Any) -> None:
        self.clients = {"dynaq": dynaq, "moto": moto}
        self.raw: dict[str, Any] = {}

    def same(self, step: str, fn: Callable[[Any], Any]) -> Any:
        got = {}
        for name, c in self.clients.items():
            try:
                self.raw[name] = fn(c)
                got[name] = _normalize(self.raw[name])
            except ClientError as exc:
                self.raw[name] = None
                got[name] = {"error": exc.response["Error"]["Code"]}
        assert got["dynaq"] == got["moto"], f"{step}: dynaq {got['dynaq']} != moto {got['moto']}"
        return self.raw


def test_the_same_calls_give_the_same_answers(node: NodeProcess, moto_url: str) -> None:
    b = Both(_client(node.url), _client(moto_url))
    urls: dict[str, str] = {}

    def create(c: Any) -> Any:
        return c.create_queue(QueueName="conf", Attributes={"VisibilityTimeout": "40"})

    raw = b.same("create_queue", create)
    urls = {k: v["QueueUrl"] for k, v in raw.items()}

    def url(c: Any) -> str:
        return urls["dynaq" if c is b.clients["dynaq"] else "moto"]

    b.same("create again, same attributes", create)
    b.same(
        "create again, other attributes",
        lambda c: c.create_queue(QueueName="conf", Attributes={"VisibilityTimeout": "41"}),
    )
    b.same("get_queue_url", lambda c: c.get_queue_url(QueueName="conf"))
    b.same("get_queue_url of nothing", lambda c: c.get_queue_url(QueueName="nothing-here"))
    b.same(
        "settable attributes",
        lambda c: c.get_queue_attributes(
            QueueUrl=url(c),
            AttributeNames=["VisibilityTimeout", "DelaySeconds", "ReceiveMessageWaitTimeSeconds"],
        ),
    )
    attributes = {
        "kind": {"DataType": "String", "StringValue": "order"},
        "n": {"DataType": "Number", "StringValue": "7"},
        "raw": {"DataType": "Binary", "BinaryValue": b"\x01\x02"},
    }
    b.same(
        "send with attributes (digests)",
        lambda c: c.send_message(
            QueueUrl=url(c), MessageBody="héllo", MessageAttributes=attributes
        ),
    )
    b.same(
        "batch with a bad entry",
        lambda c: c.send_message_batch(
            QueueUrl=url(c),
            Entries=[
                {"Id": "ok", "MessageBody": "fine"},
                {"Id": "late", "MessageBody": "x", "DelaySeconds": 901},
            ],
        ),
    )
    b.same(
        "batch with repeated ids",
        lambda c: c.send_message_batch(
            QueueUrl=url(c),
            Entries=[{"Id": "a", "MessageBody": "1"}, {"Id": "a", "MessageBody": "2"}],
        ),
    )
    b.same(
        "batch of eleven",
        lambda c: c.send_message_batch(
            QueueUrl=url(c), Entries=[{"Id": str(i), "MessageBody": "x"} for i in range(11)]
        ),
    )

    def receive_all(c: Any) -> Any:
        out = c.receive_message(
            QueueUrl=url(c), MaxNumberOfMessages=10, MessageAttributeNames=["All"],
            AttributeNames=["ApproximateReceiveCount"],
        )  # fmt: skip
        out["Messages"].sort(key=lambda m: m["Body"])
        return out

    raw = b.same("receive with attributes", receive_all)
    handles = {k: [m["ReceiptHandle"] for m in v["Messages"]] for k, v in raw.items()}

    def handle_list(c: Any) -> list[str]:
        return handles["dynaq" if c is b.clients["dynaq"] else "moto"]

    b.same(
        "delete batch, one handle invalid",
        lambda c: c.delete_message_batch(
            QueueUrl=url(c),
            Entries=[{"Id": f"d{i}", "ReceiptHandle": h} for i, h in enumerate(handle_list(c))],
        ),
    )
    b.same("receive when empty", lambda c: c.receive_message(QueueUrl=url(c)))
    b.same(
        "receive, bad MaxNumberOfMessages",
        lambda c: c.receive_message(QueueUrl=url(c), MaxNumberOfMessages=11),
    )
    b.same("tag", lambda c: c.tag_queue(QueueUrl=url(c), Tags={"a": "1", "b": "2"}))
    b.same("untag", lambda c: c.untag_queue(QueueUrl=url(c), TagKeys=["a"]))
    b.same("list tags", lambda c: c.list_queue_tags(QueueUrl=url(c)))

    # FIFO: content-based deduplication returns the first send's id
    def fifo(c: Any) -> Any:
        return c.create_queue(
            QueueName="conf.fifo",
            Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
        )

    raw = b.same("create fifo", fifo)
    fifo_urls = {k: str(v["QueueUrl"]) for k, v in raw.items()}

    def furl(c: Any) -> str:
        return fifo_urls["dynaq" if c is b.clients["dynaq"] else "moto"]

    b.same(
        "fifo send", lambda c: c.send_message(QueueUrl=furl(c), MessageBody="a", MessageGroupId="g")
    )
    b.same(
        "fifo duplicate",
        lambda c: c.send_message(QueueUrl=furl(c), MessageBody="a", MessageGroupId="g"),
    )
    b.same(
        "fifo receive: the duplicate is not delivered",
        lambda c: c.receive_message(QueueUrl=furl(c), MaxNumberOfMessages=10, VisibilityTimeout=0),
    )
    b.same("fifo without group", lambda c: c.send_message(QueueUrl=furl(c), MessageBody="b"))
    b.same(
        "fifo attributes",
        lambda c: c.get_queue_attributes(
            QueueUrl=furl(c), AttributeNames=["FifoQueue", "ContentBasedDeduplication"]
        ),
    )
    b.same("list by prefix", lambda c: c.list_queues(QueueNamePrefix="conf"))
    dlq_arn = b.same(
        "queue arn", lambda c: c.get_queue_attributes(QueueUrl=url(c), AttributeNames=["QueueArn"])
    )
    policy = {k: json.dumps({"deadLetterTargetArn": v["Attributes"]["QueueArn"], "maxReceiveCount": 3})
              for k, v in dlq_arn.items()}  # fmt: skip
    raw = b.same(
        "create with a redrive policy",
        lambda c: c.create_queue(
            QueueName="conf-src",
            Attributes={"RedrivePolicy": policy["dynaq" if c is b.clients["dynaq"] else "moto"]},
        ),
    )
    b.same("dead letter sources", lambda c: c.list_dead_letter_source_queues(QueueUrl=url(c)))
    b.same("delete", lambda c: c.delete_queue(QueueUrl=furl(c)))
    b.same("after delete", lambda c: c.get_queue_url(QueueName="conf.fifo"))
