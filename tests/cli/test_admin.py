"""Every admin command of ``dynaq`` against a real node process, output and exit code checked."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynaq.client import Client
from dynaq.testing.process import NodeProcess, free_port, node_process
from tests.cli.helpers import Run

ADMIN = "cli-admin-0123456789"
READER = "cli-reader-0123456789"
TOKENS = f"ops:{ADMIN}:admin=*,reader:{READER}:read=*"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    p = node_process(tmp_path_factory.mktemp("cli"), env={"DYNAQ_AUTH_TOKENS": TOKENS})
    p.start()
    try:
        yield p
    finally:
        p.kill()


@pytest.fixture
def dynaq(node: NodeProcess) -> Run:
    return Run(node, ADMIN)


def test_cluster_status(dynaq: Run, node: NodeProcess) -> None:
    out = dynaq("cluster", "status")
    lines = out.splitlines()
    # A node of several workers is one member too, and says which worker answered.
    got = dynaq.json("cluster", "status")
    head = f"endpoint 127.0.0.1:{node.port}: serving (node dynaq-1, 1 members"
    if "worker" in got:
        n = got["workers"]
        assert got["workers_live"] == n > 1 and got["worker"].startswith("dynaq-1-w")
        # Each run is a new connection: the kernel may hand it to another worker.
        head += "; answered by dynaq-1-w"
        assert lines[0].endswith(f", {n} of {n} workers live)"), lines[0]
    assert lines[0].startswith(head) and lines[0].endswith(")")
    assert lines[1].split() == ["MEMBER", "HTTP", "LANES", "FROM_ID", "TO_ID"]
    assert lines[2].split()[:3] == ["dynaq-1", f"127.0.0.1:{node.port}", "1024"]
    assert got["status"] == "serving" and [m["lanes"] for m in got["members"]] == [1024]


def test_queue_commands(dynaq: Run) -> None:
    out = dynaq("queue", "create", "jobs", "--visibility-timeout", "5", "--max-partitions", "4")
    assert out.splitlines()[0] == "queue jobs created"
    assert "visibility_timeout_s  5" in out and "max_partitions        4" in out
    dynaq("queue", "create", "jobs", code=4)
    assert "already_exists" in dynaq.stderr

    assert dynaq("queue", "set", "jobs", "--no-compressed", "--visibility-timeout", "7").startswith(
        "queue jobs updated"
    )
    dynaq("queue", "set", "jobs", code=2)  # nothing to set
    shown = dynaq.json("queue", "show", "jobs")
    assert shown["settings"]["visibility_timeout_s"] == 7 and shown["depth"] == 0

    ids = dynaq("queue", "send", "jobs", "one", "two", "--attr", "k=v").split()
    assert len(ids) == 2 and all(i.isdigit() for i in ids)
    (third,) = dynaq.json("queue", "send", "jobs", "-", stdin="three\n")["ids"]

    listed = dynaq("queue", "list").splitlines()
    assert listed[0].split() == [
        "NAME", "VISIBLE", "IN_FLIGHT", "DELAYED", "DEAD_LETTERED", "OLDEST_S", "PARTITIONS",
        "VISIBILITY_S",
    ]  # fmt: skip
    # One partition per process serving the node (each worker cuts its own lanes).
    parts = str(dynaq.json("cluster", "status").get("workers", 1))
    assert listed[1].split()[:3] == ["jobs", "3", "0"] and listed[1].split()[-2:] == [parts, "7"]
    listed_json = dynaq.json("queue", "list")["queues"][0]
    assert (listed_json["depth"], listed_json["visible"], listed_json["delayed"]) == (3, 3, 0)

    # Peeks go in id order; an id is a place in the keyspace, not a send order (a
    # request through another worker writes into another lane).
    by_body = {"one": ids[0], "two": ids[1], "three": third}
    in_order = sorted(by_body, key=lambda body: int(by_body[body]))
    peeked = dynaq("queue", "peek", "jobs").splitlines()
    assert peeked[0].split() == ["ID", "ENQUEUED_MS", "BODY"]
    assert [line.split()[-1] for line in peeked[1:]] == in_order
    assert [line.split()[0] for line in peeked[1:]] == [by_body[b] for b in in_order]
    page = dynaq.json("queue", "peek", "jobs", "--limit", "2")
    assert [m["body"] for m in page["messages"]] == in_order[:2]
    for m in page["messages"]:
        if m["body"] != "three":  # sent with --attr k=v
            assert m["attributes"] == {"k": "v"}
    # where the next page starts
    assert int(by_body[in_order[1]]) < int(page["next_from_id"]) <= int(by_body[in_order[2]])

    # Receives promise no order across lanes (a node of workers serves its own lanes
    # first): two of the three, then the one left.
    got = dynaq.json("queue", "receive", "jobs", "--max", "2", "--delete")
    taken = {m["body"] for m in got["messages"]}
    assert len(taken) == 2 and taken < {"one", "two", "three"} and got["deleted"] == 2
    (left,) = {"one", "two", "three"} - taken
    out = dynaq("queue", "receive", "jobs", "--visibility-timeout", "30")
    assert out.splitlines()[1].split() == [by_body[left], "1", left]
    assert dynaq.json("queue", "show", "jobs")["in_flight"] == 1

    assert dynaq("queue", "delete", "jobs") == "queue jobs deleted\n"
    dynaq("queue", "show", "jobs", code=3)
    assert "queue_not_found" in dynaq.stderr


def test_queue_task_commands(dynaq: Run) -> None:
    dynaq("queue", "create", "work-dlq")
    dynaq("queue", "create", "work")
    assert dynaq("queue", "dlq-sources", "work-dlq") == ""
    dynaq("queue", "send", "work-dlq", "a", "b", "c")
    # no origin and no --to: every message is skipped, and the task still ends done
    out = dynaq("queue", "redrive", "work-dlq")
    assert out.startswith("redrive of work-dlq done: 0 moved, 3 skipped")
    moved = dynaq.json("queue", "redrive", "work-dlq", "--to", "work", "--rate", "100")
    assert (moved["state"], moved["moved"], moved["to_queue"]) == ("done", 3, "work")
    assert dynaq.json("queue", "show", "work")["depth"] == 3
    purged = dynaq.json("queue", "purge", "work")
    assert (purged["kind"], purged["state"], purged["moved"]) == ("purge", "done", 3)
    started = dynaq.json("queue", "purge", "work", "--no-wait")
    assert started["state"] in ("running", "done")
    dynaq("queue", "purge", "nothing-here", code=3)
    dynaq("queue", "redrive", "work-dlq", "--to", "work-dlq", code=1)  # refused: 422
    assert "to_queue" in dynaq.stderr
    for q in ("work", "work-dlq"):  # the module's node is shared: leave it as found
        dynaq("queue", "delete", q)


def test_a_redrive_is_cancelled_from_the_cli(dynaq: Run) -> None:
    dynaq("queue", "create", "slow-dlq")
    dynaq("queue", "create", "slow")
    dynaq("queue", "send", "slow-dlq", *(f"m{i}" for i in range(30)))
    started = dynaq.json("queue", "redrive", "slow-dlq", "--to", "slow", "--rate", "1", "--no-wait")
    out = dynaq.json("queue", "cancel-task", "slow-dlq", started["id"])
    assert out["id"] == started["id"] and out["state"] in ("cancelling", "cancelled")
    # Asked again, it answers cancelling until the task has ended, then 409.
    deadline = time.monotonic() + 10
    while dynaq.exit_code("queue", "cancel-task", "slow-dlq", started["id"]) == 0:
        assert time.monotonic() < deadline, "the redrive did not stop"
        time.sleep(0.1)
    assert "task_not_running" in dynaq.stderr and "cancelled" in dynaq.stderr
    # At one a second the whole redrive takes 30 s: it stopped long before (a loaded
    # machine may start the CLI slowly, so a few pages may have moved meanwhile).
    left = dynaq.json("queue", "show", "slow-dlq")["depth"]
    assert left >= 20 and left + dynaq.json("queue", "show", "slow")["depth"] == 30
    for q in ("slow", "slow-dlq"):
        dynaq("queue", "delete", q)


def test_topic_commands(dynaq: Run) -> None:
    dynaq("queue", "create", "a")
    dynaq("queue", "create", "b")
    assert dynaq("topic", "create", "events") == "topic events created\n"
    assert dynaq("topic", "subscribe", "events", "a") == "a subscribed to events\n"
    assert dynaq.json("topic", "subscribe", "events", "b")["queues"] == ["a", "b"]
    assert dynaq("topic", "show", "events").split() == ["QUEUE", "a", "b"]
    assert "events  a,b" in dynaq("topic", "list")
    sent = dynaq.json("topic", "publish", "events", "hello")["ids"]
    assert sorted(sent) == ["a", "b"] and all(len(v) == 1 for v in sent.values())
    assert dynaq("topic", "unsubscribe", "events", "b") == "b unsubscribed from events\n"
    assert dynaq("topic", "delete", "events") == "topic events deleted\n"
    dynaq("topic", "show", "events", code=3)
    dynaq("queue", "delete", "a")
    dynaq("queue", "delete", "b")


def test_batch_commands(dynaq: Run) -> None:
    batch = dynaq("batch", "open", "--user-key", "nightly").strip()
    assert batch.isdigit()
    blocks = dynaq.json("batch", "add-items", batch, "2")["blocks"]
    items = [f"{batch}:{b['id']}:{i}" for b in blocks for i in range(b["upto"])]
    assert dynaq("batch", "close", batch) == f"batch {batch} closed; complete: no\n"
    assert dynaq("batch", "ack", *items) == f"acked 2; completed batches: {batch}\n"
    shown = dynaq.json("batch", "show", batch)
    assert (shown["complete"], shown["pending"], shown["user_key"]) == (True, 0, "nightly")
    assert "complete         yes" in dynaq("batch", "show", batch)
    assert dynaq("batch", "delete", batch) == f"batch {batch} deleted (2 items)\n"
    est = dynaq.json("batch", "open", "--mode", "estimated")["batch_id"]
    assert dynaq.json("batch", "show", str(est), "--mode", "estimated")["mode"] == "estimated"
    dynaq("batch", "show", str(est), code=1)  # the wrong mode: 422 wrong_batch_mode
    assert "wrong_batch_mode" in dynaq.stderr


def test_definitions_round_trip(dynaq: Run, tmp_path: Path) -> None:
    dynaq("queue", "create", "orders", "--visibility-timeout", "45", "--max-partitions", "3")
    dynaq("queue", "create", "audit")
    dynaq("topic", "create", "order-events")
    dynaq("topic", "subscribe", "order-events", "orders")
    dynaq("topic", "subscribe", "order-events", "audit")
    file = tmp_path / "defs.json"
    assert dynaq("definitions", "export", str(file)) == (f"exported 2 queues, 1 topics to {file}\n")
    defs = json.loads(file.read_text())
    ((topic,),) = [defs["topics"]]
    assert topic["name"] == "order-events" and sorted(topic["queues"]) == ["audit", "orders"]
    assert json.loads(dynaq("definitions", "export")) == defs  # stdout

    # Into another node, where "audit" exists with other settings.
    other = node_process(tmp_path, "dynaq-2", env={"DYNAQ_AUTH_TOKENS": TOKENS}).start()
    try:
        there = ("--endpoint", other.url)
        dynaq("queue", "create", "audit", "--visibility-timeout", "9", *there)
        out = dynaq("definitions", "import", str(file), *there)
        assert out == "queues: 1 created, 1 updated; topics: 1 created; subscriptions: 2 set\n"
        exported = {q["name"]: q["settings"] for q in defs["queues"]}
        assert exported["orders"]["visibility_timeout_s"] == 45
        assert exported["orders"]["max_partitions"] == 3
        assert dynaq.json("queue", "show", "orders", *there)["settings"] == exported["orders"]
        assert (
            dynaq.json("queue", "show", "audit", *there)["settings"]["visibility_timeout_s"] == 30
        )
        assert sorted(dynaq.json("topic", "show", "order-events", *there)["queues"]) == [
            "audit",
            "orders",
        ]
        assert json.loads(dynaq("definitions", "export", *there)) == defs
        again = dynaq.json("definitions", "import", str(file), *there)
        assert again == {
            "queues_created": 0,
            "queues_updated": 2,
            "topics_created": 0,
            "subscriptions_set": 0,
        }
    finally:
        other.kill()
    bad = tmp_path / "bad.json"
    bad.write_text('{"queues": []}')
    dynaq("definitions", "import", str(bad), code=2)
    bad.write_text('{"dynaq_definitions": 1, "queues": [{"name": "x", "settings": {"nope": 1}}]}')
    dynaq("definitions", "import", str(bad), code=2)
    assert "unknown queue settings: nope" in dynaq.stderr


def test_exit_codes_for_access_and_reachability(dynaq: Run) -> None:
    dynaq("queue", "list", token=None, code=5)
    assert "unauthorized" in dynaq.stderr
    dynaq("queue", "create", "nope", token=READER, code=5)
    assert "forbidden" in dynaq.stderr and READER not in dynaq.stderr
    dynaq(
        "queue", "list", "--endpoint", f"http://127.0.0.1:{free_port()}", "--timeout", "2", code=6
    )
    assert "unreachable" in dynaq.stderr
    dynaq("queue", "list", "--endpoint", "ftp://x", code=2)
    dynaq("queue", "nonsense", code=2)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_a_timeout_that_is_not_a_positive_number_is_a_usage_error(dynaq: Run, value: str) -> None:
    dynaq("queue", "list", "--timeout", value, code=2)
    assert "argument --timeout" in dynaq.stderr


def test_queue_settings_beyond_the_partitions(dynaq: Run) -> None:
    """Dead letters, delay, retention, FIFO and tags: set, shown, and checked."""
    dynaq("queue", "create", "flags-dlq.fifo", "--fifo")
    dynaq("queue", "create", "flags-plain")
    shown = dynaq.json(
        "queue", "create", "flags-q.fifo", "--fifo", "--content-based-dedup",
        "--delay", "3", "--retention", "7200", "--receive-wait", "2",
        "--max-message-bytes", "4096", "--tag", "team=a", "--tag", "env=prod",
        "--dead-letter-queue", "flags-dlq.fifo", "--max-receive-count", "4",
    )["settings"]  # fmt: skip
    assert shown["fifo"] and shown["content_based_dedup"]
    assert (shown["delay_s"], shown["retention_s"], shown["receive_wait_s"]) == (3, 7200, 2)
    assert shown["max_message_bytes"] == 4096
    assert shown["tags"] == {"env": "prod", "team": "a"}
    assert shown["redrive_policy"] == {
        "dead_letter_queue": "flags-dlq.fifo",
        "max_receive_count": 4,
    }
    table = dynaq("queue", "show", "flags-q.fifo")
    assert (
        'redrive_policy        {"dead_letter_queue":"flags-dlq.fifo","max_receive_count":4}'
        in table
    )
    dynaq("queue", "set", "flags-q.fifo", "--dead-letter-queue", "flags-dlq.fifo", code=2)
    assert "go together" in dynaq.stderr
    dynaq("queue", "set", "flags-q.fifo", "--tag", "nokey", code=2)
    dynaq("queue", "set", "flags-plain", "--fifo", code=1)
    assert "fifo is set when a queue is created" in dynaq.stderr


def test_topic_subscribe_keeps_an_existing_subscription_and_404s_what_is_missing(
    dynaq: Run, node: NodeProcess
) -> None:
    dynaq("queue", "create", "sub-q")
    dynaq("topic", "create", "sub-t")
    with Client(node.url, token=ADMIN) as c:
        c.subscribe("sub-t", "sub-q", filter_policy={"kind": ["order"]}, raw_delivery=False)
    assert dynaq("topic", "subscribe", "sub-t", "sub-q") == "sub-q already subscribed to sub-t\n"
    with Client(node.url, token=ADMIN) as c:  # a re-run must not drop the filter policy
        assert c.topic_subscriptions("sub-t")["sub-q"] == {
            "filter_policy": {"kind": ["order"]},
            "filter_scope": "attributes",
            "raw_delivery": False,
        }
    dynaq("topic", "subscribe", "sub-t", "no-such-queue", code=3)
    dynaq("topic", "subscribe", "no-such-topic", "sub-q", code=3)
