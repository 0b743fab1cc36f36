"""The tools that already speak SQS, unmodified, against a real node: the aws CLI,
a Celery worker on kombu's SQS transport (tasks, a retry, a countdown) and a
dramatiq worker on dramatiq-sqs (an actor, a retry)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dynaq.testing.process import ROOT, NodeProcess, node_process

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    p = node_process(tmp_path_factory.mktemp("sqs-clients"))
    p.start()
    try:
        yield p
    finally:
        p.kill()


def _env(node: NodeProcess, out: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNAQ_")}
    env.update(
        {
            "DYNAQ_SQS_PORT": node.url.rsplit(":", 1)[1],
            "TASKS_OUT": str(out),
            "PYTHONPATH": str(ROOT),
            "AWS_ACCESS_KEY_ID": "AKID",
            "AWS_SECRET_ACCESS_KEY": "SECRET",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )
    return env


def _aws(node: NodeProcess, *args: str) -> Any:
    done = subprocess.run(
        [str(BIN / "aws"), "sqs", *args, "--endpoint-url", node.url, "--output", "json"],
        env=_env(node, Path("/dev/null")),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else None


def _records(path: Path, want: set[str], limit_s: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + limit_s
    rows: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        rows = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        if want <= {r["kind"] for r in rows}:
            return rows
        time.sleep(0.2)
    raise AssertionError(f"only {[r['kind'] for r in rows]} within {limit_s:g} s")


def test_the_aws_cli(node: NodeProcess) -> None:
    url = _aws(node, "create-queue", "--queue-name", "cli-q")["QueueUrl"]
    assert url == f"{node.url}/000000000000/cli-q"
    sent = _aws(node, "send-message", "--queue-url", url, "--message-body", "from the cli")
    assert sent["MD5OfMessageBody"] == "e6db3bd4f9f0ac2b7fb1fcb8f62ba1e0" or sent["MessageId"]
    got = _aws(node, "receive-message", "--queue-url", url, "--wait-time-seconds", "2")
    [m] = got["Messages"]
    assert m["Body"] == "from the cli" and m["MessageId"] == sent["MessageId"]
    _aws(node, "delete-message", "--queue-url", url, "--receipt-handle", m["ReceiptHandle"])
    attrs = _aws(node, "get-queue-attributes", "--queue-url", url, "--attribute-names", "All")
    assert attrs["Attributes"]["ApproximateNumberOfMessagesNotVisible"] == "0"
    urls = _aws(node, "list-queues", "--queue-name-prefix", "cli-")["QueueUrls"]
    assert urls == [url]
    _aws(node, "delete-queue", "--queue-url", url)


def test_a_celery_worker_runs_tasks_retries_and_countdowns(
    node: NodeProcess, tmp_path: Path
) -> None:
    out = tmp_path / "tasks.jsonl"
    env = _env(node, out)
    cmd = [str(BIN / "celery"), "-A", "tests.aws.apps.celery_app", "worker", "--pool", "solo",
           "-Q", "celery-jobs", "-l", "warning"]  # fmt: skip
    with open(tmp_path / "worker.log", "w") as log:
        worker = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
        rows = _celery_run(worker, env, out)
    by_kind = {r["kind"]: r for r in rows}
    assert by_kind["add"]["result"] == 5
    assert by_kind["flaky-done"]["retries"] == 1 and "flaky-failed" in by_kind
    assert by_kind["later"]["waited"] >= 1.9  # the countdown held it


def _celery_run(
    worker: subprocess.Popen[bytes], env: dict[str, str], out: Path
) -> list[dict[str, Any]]:
    try:
        send = (
            "from tests.aws.apps.celery_app import add, flaky, later\n"
            "import time\n"
            "add.delay(2, 3)\n"
            "flaky.delay(7)\n"
            "later.apply_async((time.time(),), countdown=2)\n"
        )
        subprocess.run([sys.executable, "-c", send], cwd=ROOT, env=env, check=True, timeout=60)
        return _records(out, {"add", "flaky-done", "later"}, 60)
    finally:
        worker.terminate()
        worker.wait(30)


def test_a_dramatiq_worker_runs_an_actor_and_its_retry(node: NodeProcess, tmp_path: Path) -> None:
    out = tmp_path / "actors.jsonl"
    env = _env(node, out)
    cmd = [str(BIN / "dramatiq"), "tests.aws.apps.dramatiq_app", "--processes", "1",
           "--threads", "2"]  # fmt: skip
    with open(tmp_path / "worker.log", "w") as log:
        worker = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
        rows = _dramatiq_run(worker, env, out)
    assert sorted(r["result"] for r in rows) == [9, 42], (tmp_path / "worker.log").read_text()[
        -2000:
    ]
    assert Path(str(out) + ".failed").exists()  # the 9 came from the retry


def _dramatiq_run(
    worker: subprocess.Popen[bytes], env: dict[str, str], out: Path
) -> list[dict[str, Any]]:
    try:
        send = (
            "from tests.aws.apps.dramatiq_app import multiply\n"
            "multiply.send(6, 7)\n"
            "multiply.send(3, 3, fail_first=True)\n"
        )
        subprocess.run([sys.executable, "-c", send], cwd=ROOT, env=env, check=True, timeout=60)
        deadline = time.monotonic() + 60
        rows: list[dict[str, Any]] = []
        while time.monotonic() < deadline and len(rows) < 2:
            rows = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
            time.sleep(0.2)
        return rows
    finally:
        worker.terminate()
        worker.wait(30)
