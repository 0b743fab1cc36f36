"""The processor tests' node: one real ``dynaq server`` process per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dynaq.testing.process import NodeProcess, node_process
from tests.processors.harness import LIVE


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    p = node_process(tmp_path_factory.mktemp("processors-node"))
    p.start()
    try:
        yield p
    finally:
        p.kill()


@pytest.fixture(autouse=True)
def no_worker_left() -> Iterator[None]:
    """A test that fails half-way leaves no worker running into the next one."""
    yield
    while LIVE:
        LIVE.pop().kill()
