"""``dynaq stream ...`` against a real node process: every command, its output and exit code."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynaq.client import Client
from dynaq.testing.process import NodeProcess, node_process
from tests.cli.helpers import Run, env_for

ADMIN = "cli-streams-0123456789"
READER = "cli-streams-reader-0123456789"
TOKENS = f"ops:{ADMIN}:admin=*,reader:{READER}:read=*"
SCHEMA = {
    "type": "object",
    "properties": {"ts": {"type": "integer"}, "price": {"type": "number"}},
    "required": ["ts", "price"],
}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    p = node_process(tmp_path_factory.mktemp("cli-streams"), env={"DYNAQ_AUTH_TOKENS": TOKENS})
    p.start()
    try:
        yield p
    finally:
        p.kill()


@pytest.fixture
def dynaq(node: NodeProcess) -> Run:
    return Run(node, ADMIN)


def test_declare_append_cat_show_delete(dynaq: Run, tmp_path: Path) -> None:
    schema = tmp_path / "trades.json"
    schema.write_text(json.dumps(SCHEMA))
    out = dynaq("stream", "declare", "trades", "--schema", str(schema), "--order-key", "ts")
    assert out.startswith("stream trades created (signature ")
    again = dynaq.json("stream", "declare", "trades", "--schema", "-", "--order-key", "ts",
                       stdin=json.dumps(SCHEMA))  # fmt: skip
    assert (again["created"], again["extended"], again["order_key"]) == (False, False, "ts")
    dynaq("stream", "declare", "trades", "--schema", str(schema), code=1)  # no order key: 409
    assert "schema_conflict" in dynaq.stderr
    dynaq("stream", "declare", "x", "--schema", "-", stdin="{not json", code=2)
    assert "not JSON" in dynaq.stderr and "Traceback" not in dynaq.stderr
    dynaq("stream", "declare", "x", "--schema", str(tmp_path / "missing.json"), code=2)

    out = dynaq("stream", "append", "trades", '{"ts": 1, "price": 10.5}', '{"ts": 2, "price": 11}')
    assert out == "appended 2 entries to trades: 0..1\n"
    lines = "\n".join(json.dumps({"ts": t, "price": 12.0}) for t in (3, 4, 5)) + "\n\n"
    assert dynaq.json("stream", "append", "trades", "-", stdin=lines) == {
        "first_index": 2,
        "count": 3,
    }
    dynaq("stream", "append", "trades", '{"ts": 0, "price": 1}', code=1)  # order key went back
    assert "order_key_decreased" in dynaq.stderr
    dynaq("stream", "append", "trades", "{oops", code=2)
    assert "is not JSON" in dynaq.stderr
    dynaq("stream", "append", "trades", '{"ts": 9}', code=1)  # the schema wants a price
    assert "invalid_input" in dynaq.stderr

    listed = dynaq("stream", "list").splitlines()
    assert listed[0].split() == ["NAME", "SIZE", "ORDER_KEY", "SEGMENTS", "SIGNATURE"]
    assert listed[1].split()[:4] == ["trades", "5", "ts", "1"]
    assert [s["name"] for s in dynaq.json("stream", "list")["streams"]] == ["trades"]
    dynaq("stream", "declare", "_cues.g.p", "--schema", str(schema))
    assert [s["name"] for s in dynaq.json("stream", "list")["streams"]] == ["trades"]
    hidden = dynaq.json("stream", "list", "--hidden")["streams"]
    assert [s["name"] for s in hidden] == ["_cues.g.p", "trades"]
    dynaq("stream", "delete", "_cues.g.p")

    shown = dynaq("stream", "show", "trades")
    figures = dict(line.split(None, 1) for line in shown[: shown.index("schema\n")].splitlines())
    assert (figures["size"], figures["order_key"], figures["segments"]) == ("5", "ts", "1")
    assert json.loads(shown[shown.index("schema\n") + 7 :]) == SCHEMA
    assert dynaq.json("stream", "show", "trades")["schema"] == SCHEMA

    cat = dynaq("stream", "cat", "trades", "--from", "1", "--count", "2").splitlines()
    assert cat[0].split() == ["INDEX", "ORDER", "ENTRY"]
    assert [line.split() for line in cat[1:]] == [
        ["1", "2", '{"ts":2,"price":11}'],
        ["2", "3", '{"ts":3,"price":12.0}'],
    ]
    everything = dynaq.json("stream", "cat", "trades")["entries"]
    assert [e["index"] for e in everything] == [0, 1, 2, 3, 4]
    assert everything[0] == {"index": 0, "order": 1, "entry": {"ts": 1, "price": 10.5}}
    since = dynaq.json("stream", "cat", "trades", "--since", "4", "--until", "4")["entries"]
    assert [e["order"] for e in since] == [4]
    dynaq("stream", "cat", "trades", "--from", "1", "--since", "2", code=2)  # one start only
    dynaq("stream", "cat", "trades", "--count", "0", code=2)
    assert "--count" in dynaq.stderr

    dynaq("stream", "append", "trades", '{"ts": 9, "price": 1}', token=READER, code=5)
    dynaq("stream", "delete", "trades", token=READER, code=5)
    assert dynaq("stream", "delete", "trades") == "stream trades deleted\n"
    for verb in ("show", "delete", "cat", "tail"):
        dynaq("stream", verb, "trades", code=3)
        assert "stream_not_found" in dynaq.stderr


def test_publisher_token(dynaq: Run, node: NodeProcess) -> None:
    dynaq("stream", "declare", "fenced", "--schema", "-", "--order-key", "ts",
          stdin=json.dumps(SCHEMA))  # fmt: skip
    with Client(node.url, token=ADMIN) as c:
        lease = c.acquire_publisher("fenced", ttl_s=60)
        dynaq("stream", "append", "fenced", '{"ts": 1, "price": 1}', code=1)
        assert "publisher_fenced" in dynaq.stderr
        token = str(lease.token)
        out = dynaq(
            "stream", "append", "fenced", '{"ts": 1, "price": 1}', "--publisher-token", token
        )
        assert out == "appended 1 entries to fenced: 0..0\n"
        c.release_publisher("fenced", lease.token)
        c.delete_stream("fenced")


def test_tail_follows_live(dynaq: Run, node: NodeProcess) -> None:
    dynaq("stream", "declare", "live", "--schema", "-", "--order-key", "ts",
          stdin=json.dumps(SCHEMA))  # fmt: skip
    for t in range(1, 4):
        dynaq("stream", "append", "live", json.dumps({"ts": t, "price": t}))
    # The last 2, then whatever comes, until 4 entries in all.
    with subprocess.Popen(
        [sys.executable, "-m", "dynaq", "stream", "tail", "live", "-n", "2", "--count", "4"],
        env=env_for(node, ADMIN),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as tail:
        try:
            assert tail.stdout is not None
            # Printed before anything new is appended:
            replayed = [tail.stdout.readline(), tail.stdout.readline()]
            assert replayed == ['1\t2\t{"ts":2,"price":2}\n', '2\t3\t{"ts":3,"price":3}\n']
            with Client(node.url, token=ADMIN) as c:
                c.append("live", [{"ts": 4, "price": 4}, {"ts": 5, "price": 5}])
            out = tail.stdout.read()  # to the end: it stops by itself after 4 entries
            assert tail.wait(30) == 0
        finally:
            tail.kill()
    assert [line.split("\t")[:2] for line in out.splitlines()] == [["3", "4"], ["4", "5"]]

    # --json: one object per line; --idle-exit ends a quiet tail.
    started = time.monotonic()
    out = dynaq("stream", "tail", "live", "--from", "3", "--idle-exit", "0.5", "--json")
    assert [json.loads(line)["index"] for line in out.splitlines()] == [3, 4]
    assert time.monotonic() - started < 20
    assert dynaq("stream", "tail", "live", "-n", "0", "--idle-exit", "0.3") == ""
    dynaq("stream", "tail", "live", "-n", "-1", code=2)
    dynaq("stream", "delete", "live")
