"""No log call passes an ``extra`` key that LogRecord reserves: such a call raises
(``KeyError: Attempt to overwrite 'name'``) and takes its caller down with it."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import dynaq

_RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def test_no_log_extra_overwrites_a_record_attribute() -> None:
    bad: list[str] = []
    for path in Path(dynaq.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.keyword)
                and node.arg == "extra"
                and isinstance(node.value, ast.Dict)
            ):
                bad += [
                    f"{path}:{node.value.lineno}: {key.value!r}"
                    for key in node.value.keys
                    if isinstance(key, ast.Constant) and key.value in _RESERVED
                ]
    assert not bad, bad
