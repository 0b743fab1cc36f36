"""The exception tree drawn in ``dynaq.errors``' docstring matches the classes it defines."""

from __future__ import annotations

import inspect
import re

import dynaq.errors
from dynaq.errors import DynaqError

# One tree line: the drawing, a class name, then an optional HTTP status.
_LINE = re.compile(r"^(?P<drawing>[ │├└─]*)(?P<name>[A-Z]\w*)(?:\s+(?P<status>\d{3})\b)?")


def _drawn_tree() -> dict[str, tuple[str | None, int | None]]:
    """``{class name: (parent name, status or None)}`` as the docstring draws them."""
    doc = dynaq.errors.__doc__
    assert doc is not None
    block = doc.split("::", 1)[1]
    tree: dict[str, tuple[str | None, int | None]] = {}
    parents: list[str] = []  # the current path from the root, one name per depth
    for line in block.splitlines():
        m = _LINE.match(line[4:])  # the block is indented by four spaces
        if m is None:
            continue
        depth = len(m["drawing"]) // 4  # each level is four characters: "├── " or "│   "
        del parents[depth:]
        status = int(m["status"]) if m["status"] else None
        tree[m["name"]] = (parents[-1] if parents else None, status)
        parents.append(m["name"])
    return tree


def _defined_errors() -> dict[str, type[DynaqError]]:
    return {
        name: cls
        for name, cls in inspect.getmembers(dynaq.errors, inspect.isclass)
        if issubclass(cls, DynaqError) and cls.__module__.startswith(dynaq.errors.__name__ + ".")
    }


def test_every_error_is_drawn_in_the_tree() -> None:
    assert set(_drawn_tree()) == set(_defined_errors())


def test_the_tree_draws_each_error_under_its_base_with_its_status() -> None:
    drawn = _drawn_tree()
    for name, cls in _defined_errors().items():
        parent, status = drawn[name]
        base = cls.__bases__[0]
        assert parent == (None if cls is DynaqError else base.__name__), name
        if status is not None:
            assert status == cls.status, name


def test_every_error_is_exported() -> None:
    assert set(dynaq.errors.__all__) == set(_defined_errors())


def test_moved_errors_keep_their_status_and_code() -> None:
    """The errors that used to live beside their services answer exactly as before."""
    from dynaq.errors import (
        BadRecord,
        BatchClosed,
        BatchNotFound,
        ClusterFull,
        SlotLost,
        WrongBatchMode,
    )

    got = {
        cls.__name__: (cls.status, cls.code, cls.retriable)
        for cls in (BatchNotFound, BatchClosed, WrongBatchMode, ClusterFull, SlotLost, BadRecord)
    }
    assert got == {
        "BatchNotFound": (404, "batch_not_found", False),
        "BatchClosed": (409, "batch_closed", True),
        "WrongBatchMode": (422, "wrong_batch_mode", False),
        "ClusterFull": (503, "cluster_full", False),
        "SlotLost": (503, "writer_slot_lost", False),
        "BadRecord": (422, "invalid_input", False),
    }
