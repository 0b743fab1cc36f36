"""``dynaq definitions`` as a backup: every queue setting (dead-letter policy, delay,
retention, FIFO, tags...) and every subscription's options survive export, then
import into an empty node; a bad file changes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dynaq.client import Client, QueueSettings
from dynaq.testing.process import NodeProcess, node_process
from tests.cli.helpers import Run


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[NodeProcess, NodeProcess]]:
    a = node_process(tmp_path, "defs-a").start()
    try:
        b = node_process(tmp_path, "defs-b").start()
        try:
            yield a, b
        finally:
            b.kill()
    finally:
        a.kill()


def _set_up(url: str) -> None:
    with Client(url) as c:
        c.create_queue(
            "jobs",
            QueueSettings(
                visibility_timeout_s=45,
                delay_s=5,
                retention_s=3600,
                receive_wait_s=2,
                max_message_bytes=4096,
                compressed_messages=True,
                tags={"team": "billing"},
            ),
        )
        c.create_queue("jobs-dlq")  # after "jobs" in the file: its policy waits for it
        c.configure_queue(
            "jobs",
            QueueSettings(redrive_policy={"dead_letter_queue": "jobs-dlq", "max_receive_count": 3}),
        )
        c.create_queue("orders.fifo", QueueSettings(fifo=True, content_based_dedup=True))
        c.create_topic("events")
        c.subscribe("events", "jobs", filter_policy={"kind": ["order"]}, raw_delivery=False)
        c.subscribe("events", "orders.fifo", filter_scope="body", filter_policy={"a": [1]})


def test_export_then_import_restores_every_setting(
    nodes: tuple[NodeProcess, NodeProcess], tmp_path: Path
) -> None:
    a, b = nodes
    _set_up(a.url)
    on_a, on_b = Run(a, ""), Run(b, "")
    file = tmp_path / "defs.json"
    on_a("definitions", "export", str(file), token=None)
    defs = json.loads(file.read_text())
    settings = {q["name"]: q["settings"] for q in defs["queues"]}
    assert settings["jobs"]["redrive_policy"] == {
        "dead_letter_queue": "jobs-dlq",
        "max_receive_count": 3,
    }
    assert (settings["jobs"]["delay_s"], settings["jobs"]["retention_s"]) == (5, 3600)
    assert settings["jobs"]["tags"] == {"team": "billing"}
    assert settings["orders.fifo"]["fifo"] and settings["orders.fifo"]["content_based_dedup"]
    (topic,) = defs["topics"]
    assert topic["subscriptions"]["jobs"] == {
        "filter_policy": {"kind": ["order"]},
        "filter_scope": "attributes",
        "raw_delivery": False,
    }

    out = on_b("definitions", "import", str(file), token=None)
    assert out == "queues: 3 created, 0 updated; topics: 1 created; subscriptions: 2 set\n"
    assert json.loads(on_b("definitions", "export", token=None)) == defs
    # The restored node routes as the first one did.
    with Client(b.url) as c:
        msg = {"body": b'{"a": 1}', "attributes": {"kind": "order"}, "group": "g"}
        got = c.publish("events", [msg])
        assert sorted(got) == ["jobs", "orders.fifo"]
        assert (
            c.publish("events", [{"body": b"x", "attributes": {"kind": "other"}, "group": "g"}])
            == {}
        )
    again = json.loads(on_b("definitions", "import", str(file), "--json", token=None))
    assert again["queues_created"] == 0 and again["subscriptions_set"] == 0


def test_a_bad_file_changes_nothing(nodes: tuple[NodeProcess, NodeProcess], tmp_path: Path) -> None:
    _, b = nodes
    run = Run(b, "")
    bad = tmp_path / "bad.json"
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"queues": [{"name": "fine"}], "topics": [{"name": "t", "queues": ["ghost"]}]},
            "ghost",
        ),
        ({"queues": [{"name": "fine"}, {"name": "bad name!"}]}, "invalid queue name"),
        ({"queues": [{"name": "fine", "settings": {"delay_s": "5"}}]}, "delay_s"),
        (
            {
                "queues": [
                    {
                        "name": "fine",
                        "settings": {
                            "redrive_policy": {
                                "dead_letter_queue": "nowhere",
                                "max_receive_count": 2,
                            }
                        },
                    }
                ]
            },
            "nowhere",
        ),
        (
            {"queues": [], "topics": [{"name": "t", "subscriptions": {"q": {"raw": True}}}]},
            "options",
        ),
    ]
    for body, named in cases:
        bad.write_text(json.dumps({"dynaq_definitions": 1, **body}))
        run("definitions", "import", str(bad), token=None, code=2)
        assert named in run.stderr and "nothing was changed" in run.stderr
    with Client(b.url) as c:
        assert c.list_queues() == [] and c.list_topics() == []
    # A file from before subscriptions were exported still imports (default options).
    old = {"dynaq_definitions": 1, "queues": [{"name": "q", "settings": {}}],
           "topics": [{"name": "t", "queues": ["q"]}]}  # fmt: skip
    bad.write_text(json.dumps(old))
    run("definitions", "import", str(bad), token=None)
    with Client(b.url) as c:
        assert c.topic_subscriptions("t") == {
            "q": {"filter_policy": None, "filter_scope": "attributes", "raw_delivery": True}
        }
