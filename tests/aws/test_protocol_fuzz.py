"""Bad input through the AWS protocols: every action of SQS (JSON) and SNS (Query), each
parameter given values of the wrong type, shape or content, against a real node.

Each answer is a 2xx or a 4xx in the protocol's own error shape, never a 5xx: the
class of bug where a lone surrogate in a SendMessage body was a 500. The sweeps are
sampled (hypothesis, a fixed number of examples), so the run stays within seconds;
a failure prints the request that caused it.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dynaq.api.aws.sqs_messages
import dynaq.api.aws.sqs_move_tasks
import dynaq.api.aws.sqs_queues  # fills ACTIONS
from dynaq.api.aws.sqs import ACTIONS as SQS_ACTIONS
from dynaq.testing.process import NodeProcess, node_process

_AWS = Path(dynaq.api.aws.sqs_messages.__file__).parent
_PARAM = re.compile(r'(?:get|required|\[)\(?"([A-Z][A-Za-z]+)"')


def _names(*files: str) -> list[str]:
    """The parameter names the handlers read (so new ones are swept too)."""
    found: set[str] = set()
    for f in files:
        found |= set(_PARAM.findall((_AWS / f).read_text()))
    return sorted(found)


SQS_PARAMS = [
    *_names("sqs.py", "sqs_queues.py", "sqs_messages.py", "sqs_move_tasks.py", "sqs_wire.py"),
    "QueueUrl", "Entries", "Attributes", "Tags", "TagKeys", "MaxResults",
]  # fmt: skip
SNS_ACTIONS = sorted(set(re.findall(r'@action\("([A-Za-z]+)"\)', (_AWS / "sns.py").read_text())))
SNS_PARAMS = [*_names("sns.py"), "TopicArn", "SubscriptionArn", "Endpoint", "Message"]

JSON_VALUES: list[Any] = [
    None, 0, -1, 1.5, 10**30, "", "x", "\x00", "\ud800", True, [], {}, [1], ["x"], {"a": 1},
    {"a": "x"}, [{}], [{"Id": "a"}], [{"Id": "a", "ReceiptHandle": "x", "MessageBody": 5}],
    {"a": {"DataType": "String"}}, {"a": {"DataType": 1}},
    {"a": {"DataType": "Binary", "BinaryValue": "***"}}, {"FifoQueue": "maybe"},
    {"RedrivePolicy": "{"}, {"RedrivePolicy": '{"maxReceiveCount": "x"}'},
]  # fmt: skip
FORM_VALUES = [
    "", "x", "-1", "0", "99999999999999999999", "\x00", "{", "[]", '{"a":1}', '{"a":[{"b":1}]}',
    "arn:aws:sqs:us-east-1:000000000000:fuzz", "arn:aws:sns:us-east-1:000000000000:fuzz",
    "arn:aws:sns:us-east-1:000000000000:fuzz:nope", "sqs", "http", "true", "FilterPolicy",
    "RawMessageDelivery", "json",
]  # fmt: skip
FORM_EXTRAS: list[dict[str, str]] = [
    {},
    {"MessageAttributes.entry.1.Name": "a", "MessageAttributes.entry.1.Value.DataType": "String"},
    {"Attributes.entry.1.key": "FilterPolicy", "Attributes.entry.1.value": "{"},
    {"PublishBatchRequestEntries.member.1.Id": "a"},
]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    p = node_process(tmp_path_factory.mktemp("fuzz"))
    p.start()
    try:
        yield p
    finally:
        p.kill()


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _sqs(node: NodeProcess, action: str, params: dict[str, Any]) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{action}"}
    return _post(node.url + "/", json.dumps(params).encode(), headers)


def _sns(node: NodeProcess, params: dict[str, str]) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    return _post(node.url + "/", urllib.parse.urlencode(params).encode(), headers)


@pytest.fixture(scope="module")
def queue_urls(node: NodeProcess) -> list[str]:
    urls = []
    for name, attrs in (("fuzz", {}), ("fuzz.fifo", {"FifoQueue": "true"})):
        status, body = _sqs(node, "CreateQueue", {"QueueName": name, "Attributes": attrs})
        assert status == 200, body
        urls.append(json.loads(body)["QueueUrl"])
    return urls


@settings(
    max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    action=st.sampled_from(sorted(SQS_ACTIONS)),
    name=st.sampled_from(SQS_PARAMS),
    value=st.sampled_from(JSON_VALUES),
    which=st.sampled_from([0, 1, None]),
)
def test_sqs_answers_bad_parameters_with_its_errors(
    node: NodeProcess, queue_urls: list[str], action: str, name: str, value: Any, which: int | None
) -> None:
    params: dict[str, Any] = {} if which is None else {"QueueUrl": queue_urls[which]}
    if action.startswith("SendMessage") and name != "MessageBody":
        params["MessageBody"] = "m"
    params[name] = value
    status, body = _sqs(node, action, params)
    assert status < 500, (action, params, status, body[:300])
    if status >= 400:
        error = json.loads(body)
        assert error["__type"] and error["message"] is not None, body[:300]


@settings(
    max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    action=st.sampled_from(SNS_ACTIONS),
    name=st.sampled_from(SNS_PARAMS),
    value=st.sampled_from(FORM_VALUES),
    extra=st.sampled_from(FORM_EXTRAS),
)
def test_sns_answers_bad_parameters_with_its_errors(
    node: NodeProcess, action: str, name: str, value: str, extra: dict[str, str]
) -> None:
    _sns(node, {"Action": "CreateTopic", "Name": "fuzz"})
    params = {"Action": action, "TopicArn": "arn:aws:sns:us-east-1:000000000000:fuzz", **extra}
    params[name] = value
    status, body = _sns(node, params)
    assert status < 500, (params, status, body[:300])
    if status >= 400:
        assert b"<ErrorResponse" in body and b"<Code>" in body, body[:300]
