"""Rough edges of ``dynaq``'s admin commands found by black-box testing, against a real
node: endpoints without a port or with an IPv6 literal, URL parts the client refuses,
non-finite numbers (a usage error naming the flag, never a body the node finds
malformed), long-poll waits the node refuses (refused the same way above and below its
range, by the CLI and the library alike), and a definitions file that is not one."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dynaq.client import Client, QueueSettings
from dynaq.errors import InvalidInput
from dynaq.testing.process import NodeProcess, node_process
from tests.cli.helpers import Run, env_for

ADMIN = "cli-edges-0123456789"
TOKENS = f"ops:{ADMIN}:admin=*"
WAIT_REFUSED = "wait time must be in 0..20 seconds"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    p = node_process(tmp_path_factory.mktemp("cli-edges"), env={"DYNAQ_AUTH_TOKENS": TOKENS})
    p.start()
    try:
        yield p
    finally:
        p.kill()


@pytest.fixture
def dynaq(node: NodeProcess) -> Run:
    return Run(node, ADMIN)


# endpoints -------------------------------------------------------------------


def test_an_endpoint_without_a_port_uses_the_schemes_default(node: NodeProcess) -> None:
    # Port 80 is not ours to listen on: the node stands in for it, in a dynaq process
    # whose default http port is the node's.
    script = (
        "import sys; from dynaq.client import policy; from dynaq.cli import main; "
        f"policy.DEFAULT_PORTS['http'] = {node.port}; main(sys.argv[1:])"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "queue", "list", "--endpoint", "http://127.0.0.1"],
        env=env_for(node, ADMIN),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.split()[:2] == ["NAME", "VISIBLE"]


def test_an_ipv6_literal_endpoint(tmp_path: Path) -> None:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    v6 = node_process(tmp_path, env={"DYNAQ_AUTH_TOKENS": TOKENS, "DYNAQ_HTTP_HOST": "::1"})
    v6.host = "[::1]"
    v6.start()
    try:
        dynaq = Run(v6, ADMIN)
        assert v6.url == f"http://[::1]:{v6.port}"  # DYNAQ_ENDPOINT of every command below
        assert dynaq("queue", "create", "v6q").startswith("queue v6q created")
        assert dynaq("queue", "list").splitlines()[1].split()[0] == "v6q"
        assert dynaq("queue", "list", "--endpoint", f"[::1]:{v6.port}").count("v6q") == 1
    finally:
        v6.kill()


@pytest.mark.parametrize(
    ("endpoint", "says"),
    [
        ("http://ops:hunter2@127.0.0.1:8081", "credentials in the URL are not supported"),
        ("http://127.0.0.1:8081/dynaq", "a path prefix (or query) is not supported"),
        ("gopher://127.0.0.1:70", "scheme 'gopher' is not supported"),
    ],
)
def test_an_endpoint_the_client_cannot_honour_is_a_usage_error(
    dynaq: Run, endpoint: str, says: str
) -> None:
    dynaq("queue", "list", "--endpoint", endpoint, code=2)
    assert says in dynaq.stderr and "hunter2" not in dynaq.stderr
    assert dynaq.stderr.count("\n") == 1


# non-finite numbers ----------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "flag", "value"),
    [
        ("create", "--visibility-timeout", "inf"),
        ("create", "--delay", "nan"),
        ("create", "--retention", "Infinity"),
        ("set", "--receive-wait", "NaN"),
        ("set", "--max-partition-age", "inf"),
    ],
)
def test_a_non_finite_setting_is_a_usage_error_naming_the_flag(
    dynaq: Run, verb: str, flag: str, value: str
) -> None:
    dynaq("queue", verb, "edges-nf", flag, value, code=2)
    assert f"argument {flag}: {value!r} is not a finite number" in dynaq.stderr
    assert "malformed" not in dynaq.stderr


def test_a_non_finite_receive_option_is_a_usage_error(dynaq: Run) -> None:
    for flag in ("--wait", "--visibility-timeout"):
        dynaq("queue", "receive", "edges-nf", flag, "inf", code=2)
        assert f"argument {flag}: 'inf' is not a finite number" in dynaq.stderr


# long-poll waits ------------------------------------------------------------


def test_a_wait_out_of_the_nodes_range_is_refused_both_ways(dynaq: Run, node: NodeProcess) -> None:
    dynaq("queue", "create", "edges-wait")
    dynaq("queue", "send", "edges-wait", "one")
    for wait in ("30", "-3", "20.5"):
        dynaq("queue", "receive", "edges-wait", "--wait", wait, code=1)
        assert "invalid_input: POST /v2/queues/edges-wait/messages/receive" in dynaq.stderr
        assert WAIT_REFUSED in dynaq.stderr
    with Client(node.url, token=ADMIN) as c:
        for seconds in (30.0, -3.0):
            with pytest.raises(InvalidInput, match=WAIT_REFUSED):
                c.receive("edges-wait", 1, wait_time_s=seconds)
        assert len(c.receive("edges-wait", 1, wait_time_s=20)) == 1  # the limit itself is fine


# definitions -----------------------------------------------------------------


def test_a_file_that_is_not_definitions_is_named_once(dynaq: Run, tmp_path: Path) -> None:
    bad = tmp_path / "not-defs.json"
    bad.write_text('{"hello": 1}\n')
    dynaq("definitions", "import", str(bad), code=2)
    assert dynaq.stderr == (
        f"dynaq: {bad}: not a dynaq definitions file (format 1); nothing was changed\n"
    )
    listed = tmp_path / "list.json"
    listed.write_text('{"dynaq_definitions": 1, "queues": {}}\n')
    dynaq("definitions", "import", str(listed), code=2)
    assert dynaq.stderr == f"dynaq: {listed}: queues must be a list; nothing was changed\n"


def test_a_definitions_file_with_a_non_finite_setting_changes_nothing(
    dynaq: Run, tmp_path: Path
) -> None:
    f = tmp_path / "inf.json"
    f.write_text(
        '{"dynaq_definitions": 1, "queues": [{"name": "edges-inf", '
        '"settings": {"visibility_timeout_s": Infinity}}]}\n'
    )
    dynaq("definitions", "import", str(f), code=2)
    assert "visibility_timeout_s: inf is not a finite number; nothing was changed" in (dynaq.stderr)
    dynaq("queue", "show", "edges-inf", code=3)


def test_an_explicit_zero_wait_does_not_long_poll(dynaq: Run, node: NodeProcess) -> None:
    """As SQS's WaitTimeSeconds=0: a receive that asks for no wait answers at once,
    whatever the queue's receive_wait_s; one that names no wait takes the queue's."""
    import time

    with Client(node.url, token=ADMIN) as c:
        c.create_queue("polled", QueueSettings(receive_wait_s=2))
        started = time.monotonic()
        assert c.receive("polled", 1, wait_time_s=0) == []
        assert time.monotonic() - started < 1.0
        started = time.monotonic()
        assert c.receive("polled", 1) == []
        assert time.monotonic() - started >= 1.8
    started = time.monotonic()
    dynaq("queue", "receive", "polled", "--wait", "0")
    assert time.monotonic() - started < 1.5 + 1.0  # the CLI's own start, no poll
