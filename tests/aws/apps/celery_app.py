"""A Celery app on kombu's SQS transport pointed at a dynaq node (``DYNAQ_SQS_PORT``);
each task records what it did in the JSON-lines file ``TASKS_OUT``."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from celery import Celery, Task

app = Celery("celery_app", broker=f"sqs://AKID:SECRET@127.0.0.1:{os.environ['DYNAQ_SQS_PORT']}")
app.conf.broker_transport_options = {
    "region": "us-east-1",
    "is_secure": False,
    "wait_time_seconds": 1,
    "polling_interval": 0.2,
    "visibility_timeout": 30,
}
app.conf.task_default_queue = "celery-jobs"


def record(kind: str, **fields: Any) -> None:
    with open(os.environ["TASKS_OUT"], "a") as f:
        f.write(json.dumps({"kind": kind, "at": time.time(), **fields}) + "\n")


@app.task
def add(x: int, y: int) -> None:
    record("add", result=x + y)


@app.task(bind=True, max_retries=3)
def flaky(self: Task, n: int) -> None:
    if self.request.retries < 1:
        record("flaky-failed", n=n)
        raise self.retry(countdown=1)
    record("flaky-done", n=n, retries=self.request.retries)


@app.task
def later(sent_at: float) -> None:
    record("later", waited=time.time() - sent_at)
