"""The text log format keeps every field a log call passes, as the JSON one does."""

from __future__ import annotations

import json
import logging

from dynaq.logs import JsonFormatter, TextFormatter


def _record(**extra: object) -> logging.LogRecord:
    record = logging.makeLogRecord({"name": "dynaq.api.middleware", "levelno": 30})
    record.levelname = "WARNING"
    record.msg = "request failed"
    record.__dict__.update(extra)
    return record


def test_a_text_line_carries_the_fields_as_key_value_pairs() -> None:
    line = TextFormatter().format(
        _record(path="/v1/queues/q/messages/1,2", code="store_unavailable", error="timed out (2 s)")
    )
    head, _, fields = line.partition("request failed ")
    assert head.endswith("WARNING dynaq.api.middleware: ")
    # Values with spaces are JSON-quoted, so the line still splits on spaces.
    assert fields == (
        'path=/v1/queues/q/messages/1,2 code=store_unavailable error="timed out (2 s)"'
    )


def test_lists_quotes_and_newlines_stay_on_one_line_and_read_back() -> None:
    line = TextFormatter().format(_record(members=["dynaq-1", "dynaq-2"], why='a "b"\nc'))
    assert "\n" not in line
    assert 'members="[\\"dynaq-1\\", \\"dynaq-2\\"]"' in line
    assert json.loads(line.split("why=", 1)[1]) == 'a "b"\nc'


def test_a_line_without_fields_is_the_plain_message_and_both_formats_agree() -> None:
    assert TextFormatter().format(_record()).endswith("dynaq.api.middleware: request failed")
    data = json.loads(JsonFormatter("dynaq-1").format(_record(queue="orders", count=3)))
    assert (data["msg"], data["queue"], data["count"], data["node"]) == (
        "request failed",
        "orders",
        3,
        "dynaq-1",
    )
