"""SQS on a full store: a retriable ServiceUnavailable that says why, not a 500."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from dynaq.core.messages import NewMessage
from dynaq.errors import InsufficientStorage
from dynaq.node import Node
from tests.fixtures.nodes import node_config


async def test_a_send_to_a_full_store_is_service_unavailable(tmp_path: Path) -> None:
    node = Node(node_config(tmp_path, embedded={"map_size_mb": 2, "min_free_disk_mb": 0}))
    await node.start()
    try:
        sqs: Any = await asyncio.to_thread(  # botocore reads its data files
            boto3.client,
            "sqs",
            endpoint_url=f"http://127.0.0.1:{node.port}",
            region_name="us-east-1",
            aws_access_key_id="any",
            aws_secret_access_key="any",
            config=Config(retries={"max_attempts": 1}),
        )
        url = (await asyncio.to_thread(sqs.create_queue, QueueName="full"))["QueueUrl"]
        info = await node.catalog.queue("full")
        for size in (20, 1):  # batches, then single messages: no room left for one
            with pytest.raises(InsufficientStorage):
                for _ in range(10_000):  # bounded: a 2 MiB map fills in a few hundred
                    await node.queues.enqueue(
                        info, [NewMessage(os.urandom(300)) for _ in range(size)]
                    )
        with pytest.raises(ClientError) as refused:
            await asyncio.to_thread(sqs.send_message, QueueUrl=url, MessageBody="x" * 300)
        err = refused.value.response
        assert err["Error"]["Code"] == "ServiceUnavailable", err
        assert err["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert "full" in err["Error"]["Message"]
        got = await asyncio.to_thread(sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=10)
        assert len(got["Messages"]) == 10  # receives keep working
    finally:
        await node.stop()
