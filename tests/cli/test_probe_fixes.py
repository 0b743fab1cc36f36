"""Admin commands a black-box probe found wanting, against a real node process: listings
with a token limited to some queues, ids as strings in ``--json``, and a redrive to a
queue that does not exist naming that queue."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from dynaq.testing.process import NodeProcess, node_process
from tests.cli.helpers import Run

ADMIN = "probe-admin-0123456789"
JOBS_READER = "probe-jobs-reader-0123456789"
TOKENS = f"ops:{ADMIN}:admin=*,jobs:{JOBS_READER}:read=queue/jobs-*"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    p = node_process(tmp_path_factory.mktemp("cli-probe"), env={"DYNAQ_AUTH_TOKENS": TOKENS})
    p.start()
    try:
        yield p
    finally:
        p.kill()


@pytest.fixture
def dynaq(node: NodeProcess) -> Run:
    return Run(node, ADMIN)


def test_a_token_limited_to_some_queues_lists_those_it_may_read(dynaq: Run) -> None:
    for queue in ("jobs-1", "jobs-2", "other"):
        dynaq("queue", "create", queue)
    dynaq("topic", "create", "events")
    dynaq("queue", "send", "jobs-1", "a", "b")

    listed = dynaq("queue", "list", token=JOBS_READER).splitlines()
    assert [line.split()[0] for line in listed[1:]] == ["jobs-1", "jobs-2"]
    assert listed[1].split()[:2] == ["jobs-1", "2"]
    assert dynaq.stderr == ""  # left out quietly
    as_json = json.loads(dynaq("queue", "list", "--json", token=JOBS_READER))
    assert [q["name"] for q in as_json["queues"]] == ["jobs-1", "jobs-2"]
    # The admin still sees everything; a bad token is still refused (exit 5).
    assert [line.split()[0] for line in dynaq("queue", "list").splitlines()[1:]] == [
        "jobs-1",
        "jobs-2",
        "other",
    ]
    dynaq("queue", "list", token="not-a-token-0123456789", code=5)


def test_a_token_that_may_read_no_topic_lists_none(dynaq: Run) -> None:
    dynaq("topic", "create", "audit")
    assert dynaq("topic", "list", token=JOBS_READER).split() == ["TOPIC", "QUEUES"]
    assert json.loads(dynaq("topic", "list", "--json", token=JOBS_READER)) == {"topics": []}
    assert dynaq.stderr == ""
    assert "audit" in dynaq("topic", "list")


def test_batch_ids_are_strings_in_json(dynaq: Run) -> None:
    opened = json.loads(dynaq("batch", "open", "--json"))
    assert isinstance(opened["batch_id"], str) and opened["batch_id"].isdigit()
    batch = opened["batch_id"]
    est = json.loads(dynaq("batch", "open", "--mode", "estimated", "--json"))
    assert isinstance(est["batch_id"], str)
    added = json.loads(dynaq("batch", "add-items", batch, "1", "--json"))
    assert added["batch_id"] == batch
    (block,) = added["blocks"]
    shown = json.loads(dynaq("batch", "show", batch, "--json"))
    assert shown["batch_id"] == batch
    closed = json.loads(dynaq("batch", "close", batch, "--json"))
    assert closed == {"batch_id": batch, "complete": False}
    acked = json.loads(dynaq("batch", "ack", f"{batch}:{block['id']}:0", "--json"))
    assert [d["batch_id"] for d in acked["completed"]] == [batch]
    deleted = json.loads(dynaq("batch", "delete", batch, "--json"))
    assert deleted["batch_id"] == batch


def test_a_redrive_to_a_missing_queue_names_it(dynaq: Run) -> None:
    dynaq("queue", "create", "dq")
    dynaq("queue", "redrive", "dq", "--to", "nope", "--no-wait", code=3)
    assert "queue_not_found" in dynaq.stderr and "'nope'" in dynaq.stderr
    dynaq("queue", "redrive", "no-such-dlq", "--to", "dq", "--no-wait", code=3)
    assert "'no-such-dlq'" in dynaq.stderr and "'dq'" not in dynaq.stderr
