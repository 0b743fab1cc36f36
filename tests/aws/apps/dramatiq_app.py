"""A dramatiq app on dramatiq-sqs pointed at a dynaq node (``DYNAQ_SQS_PORT``); each
actor records what it did in the JSON-lines file ``TASKS_OUT``."""

from __future__ import annotations

import json
import os
import time

import dramatiq
from dramatiq_sqs import SQSBroker

broker = SQSBroker(
    namespace="dramatiq_",
    endpoint_url=f"http://127.0.0.1:{os.environ['DYNAQ_SQS_PORT']}",
    region_name="us-east-1",
    aws_access_key_id="AKID",
    aws_secret_access_key="SECRET",
)
dramatiq.set_broker(broker)


@dramatiq.actor(max_retries=3, min_backoff=200, max_backoff=500)
def multiply(x: int, y: int, fail_first: bool = False) -> None:
    path = os.environ["TASKS_OUT"]
    if fail_first and not os.path.exists(path + ".failed"):
        open(path + ".failed", "w").close()
        raise RuntimeError("first attempt fails")
    with open(path, "a") as f:
        f.write(json.dumps({"kind": "multiply", "result": x * y, "at": time.time()}) + "\n")
