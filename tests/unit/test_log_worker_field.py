"""Each line a node's worker logs names the worker (the workers share the node's
name and, usually, its log stream)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from dynaq.logs import JsonFormatter, TextFormatter, name_worker


@pytest.fixture
def handler() -> Iterator[logging.Handler]:
    root = logging.getLogger()
    saved = root.handlers[:]
    h = logging.StreamHandler()
    root.handlers[:] = [h]
    yield h
    root.handlers[:] = saved


def test_every_line_carries_the_worker_in_both_formats(handler: logging.Handler) -> None:
    name_worker("dynaq-1-w1")
    name_worker("dynaq-1-w1")  # idempotent: one field, one filter
    assert len(handler.filters) == 1
    record = logging.makeLogRecord({"msg": "hello", "name": "t", "levelname": "INFO"})
    for f in handler.filters:
        assert isinstance(f, logging.Filter) and f.filter(record)
    line = json.loads(JsonFormatter("dynaq-1").format(record))
    assert (line["node"], line["worker"]) == ("dynaq-1", "dynaq-1-w1")
    assert TextFormatter().format(record).endswith("worker=dynaq-1-w1")
