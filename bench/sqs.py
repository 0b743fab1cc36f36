"""SQS through boto3: dynaq's SQS endpoint against moto's SQS server, side by side.

``python -m bench sqs [--quick] [--messages N] [--rounds R] [--threads T]``

Both servers run on this machine in the same process tree (a dynaq node on
LMDB, moto's ``ThreadedMotoServer``), and are loaded alternately, round after
round, by the same unmodified boto3 client code: ``send_message_batch`` of 10 x
256-byte messages from T threads, then ``receive_message`` (10, no wait) +
``delete_message_batch`` from T threads until every message was received. The
yardstick is the peer's figure in the same run; the result holds both and their
ratios. What it measures is mostly boto3's own cost per call (signing,
serializing, MD5 checks) plus the server's, on two shared cores.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import moto
from botocore.config import Config
from moto.server import ThreadedMotoServer

from bench.common import progress, start_node
from dynaq.testing.process import free_port

BODY = "x" * 256
BATCH = 10


def _client(url: str, threads: int) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        config=Config(max_pool_connections=threads, retries={"max_attempts": 3}),
    )


def _timed(threads: int, work: Callable[[], bool]) -> float:
    """Run ``work`` on ``threads`` threads until it returns False; seconds taken."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for f in [pool.submit(lambda: [None for _ in iter(work, False)]) for _ in range(threads)]:
            f.result()
    return time.perf_counter() - t0


def _round(url: str, queue: str, n: int, threads: int, limit_s: float) -> tuple[float, float]:
    sqs = _client(url, threads)
    q = sqs.create_queue(QueueName=queue)["QueueUrl"]
    left = [n // BATCH]
    lock = threading.Lock()
    entries = [{"Id": str(i), "MessageBody": BODY} for i in range(BATCH)]

    def send() -> bool:
        with lock:
            if left[0] <= 0:
                return False
            left[0] -= 1
        out = sqs.send_message_batch(QueueUrl=q, Entries=entries)
        assert not out.get("Failed"), out
        return True

    sent = (n // BATCH) * BATCH
    send_s = _timed(threads, send)
    got = [0]
    deadline = time.monotonic() + limit_s

    def consume() -> bool:
        with lock:
            if got[0] >= sent or time.monotonic() > deadline:
                return False
        msgs = sqs.receive_message(QueueUrl=q, MaxNumberOfMessages=BATCH).get("Messages", [])
        if msgs:
            sqs.delete_message_batch(
                QueueUrl=q,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)
                ],
            )
            with lock:
                got[0] += len(msgs)
        return True

    consume_s = _timed(threads, consume)
    if got[0] < sent:
        raise RuntimeError(f"{url}: received {got[0]} of {sent} in {limit_s:g} s")
    sqs.delete_queue(QueueUrl=q)
    return sent / send_s, got[0] / consume_s


def main(argv: list[str]) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench sqs")
    p.add_argument("--messages", type=int, default=10_000, help="messages per phase and server")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds per server")
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--quick", action="store_true", help="tiny smoke run")
    a = p.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request lines
    n, rounds = (200, 1) if a.quick else (max(BATCH, a.messages), max(1, a.rounds))
    tmp = Path(tempfile.mkdtemp(prefix="dynaq-bench-"))
    node = None
    port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    figures: dict[str, list[tuple[float, float]]] = {"dynaq": [], "moto": []}
    try:
        node = start_node(tmp)
        moto.start()
        urls = {"dynaq": node.url, "moto": f"http://127.0.0.1:{port}"}
        progress(f"dynaq at {node.url}, moto at {urls['moto']}; {n} messages, {rounds} round(s)")
        for r in range(rounds):
            for name, url in urls.items():
                figures[name].append(_round(url, f"bench-{r}", n, max(1, a.threads), 300.0))
                progress(f"round {r + 1} {name}: send {figures[name][-1][0]:.0f}/s, "
                         f"receive+delete {figures[name][-1][1]:.0f}/s")  # fmt: skip
    finally:
        moto.stop()
        if node is not None:
            try:
                node.terminate()
            except Exception:  # noqa: BLE001 - cleanup must reach the rmtree
                node.kill()
        shutil.rmtree(tmp, ignore_errors=True)

    def best(name: str, i: int) -> float:
        return max(f[i] for f in figures[name])

    send, consume = best("dynaq", 0), best("dynaq", 1)
    peer_send, peer_consume = best("moto", 0), best("moto", 1)
    return {
        "scenario": "sqs",
        "quick": a.quick,
        "messages": n,
        "rounds": rounds,
        "threads": a.threads,
        "sqs_send_batch_msgs_per_s": round(send),
        "sqs_receive_delete_msgs_per_s": round(consume),
        "peer": "moto[server] " + _moto_version(),
        "peer_send_batch_msgs_per_s": round(peer_send),
        "peer_receive_delete_msgs_per_s": round(peer_consume),
        "send_ratio_vs_peer": round(send / peer_send, 2),
        "receive_delete_ratio_vs_peer": round(consume / peer_consume, 2),
    }


def _moto_version() -> str:
    return str(moto.__version__)
