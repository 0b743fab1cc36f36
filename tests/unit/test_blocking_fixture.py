"""The suite's blocking-call guard (tests/fixtures/blocking.py) is on in async tests."""

from __future__ import annotations

import asyncio
import time

import pytest
from blockbuster import BlockingError


async def test_a_blocking_call_on_the_loop_fails_the_test() -> None:
    with pytest.raises(BlockingError):
        time.sleep(0.001)  # noqa: ASYNC251 - the point of this test
    await asyncio.to_thread(time.sleep, 0.001)  # a worker thread may block


def test_sync_tests_may_block() -> None:
    time.sleep(0.001)
