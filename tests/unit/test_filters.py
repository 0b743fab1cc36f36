"""SNS-grammar filter policies: each rule kind, AND across names, OR within one, bad input."""

from __future__ import annotations

import pytest

from dynaq.core.filters import compile_policy
from dynaq.errors import InvalidInput


@pytest.mark.parametrize(
    ("policy", "attrs", "expected"),
    [
        ({"color": ["red", "blue"]}, {"color": "blue"}, True),
        ({"color": ["red"]}, {"color": "green"}, False),
        ({"color": ["red"]}, None, False),
        ({"size": [5]}, {"size": "5.0"}, True),
        ({"size": [5]}, {"size": "five"}, False),
        ({"id": [{"prefix": "ord-"}]}, {"id": "ord-17"}, True),
        ({"id": [{"prefix": "ord-"}]}, {"id": "inv-17"}, False),
        ({"n": [{"numeric": [">", 0, "<=", 100]}]}, {"n": "100"}, True),
        ({"n": [{"numeric": [">", 0, "<=", 100]}]}, {"n": "0"}, False),
        ({"n": [{"numeric": ["=", 3]}]}, {"n": "3"}, True),
        ({"n": [{"numeric": ["<", 3]}]}, {"n": "abc"}, False),
        ({"k": [{"exists": True}]}, {"k": ""}, True),
        ({"k": [{"exists": True}]}, {}, False),
        ({"k": [{"exists": False}]}, {}, True),
        ({"k": [{"exists": False}]}, {"k": "x"}, False),
        ({"c": [{"anything-but": ["red", "blue"]}]}, {"c": "green"}, True),
        ({"c": [{"anything-but": "red"}]}, {"c": "red"}, False),
        ({"c": [{"anything-but": "red"}]}, {}, False),
        ({"c": [{"anything-but": {"prefix": "tmp"}}]}, {"c": "tmp1"}, False),
        ({"c": [{"anything-but": {"prefix": "tmp"}}]}, {"c": "real"}, True),
        ({"a": ["x"], "b": [{"numeric": [">=", 10]}]}, {"a": "x", "b": "10"}, True),
        ({"a": ["x"], "b": [{"numeric": [">=", 10]}]}, {"a": "x", "b": "9"}, False),
        ({"a": ["x", {"prefix": "y"}]}, {"a": "yes"}, True),
    ],
)
def test_rules(policy: dict[str, object], attrs: dict[str, str] | None, expected: bool) -> None:
    assert compile_policy(policy)(attrs) is expected


@pytest.mark.parametrize(
    "policy",
    [
        {},
        [],
        "x",
        {"a": []},
        {"a": "x"},
        {"a": [True]},
        {"a": [None]},
        {"a": [{"prefix": 1}]},
        {"a": [{"numeric": [">"]}]},
        {"a": [{"numeric": ["!=", 1]}]},
        {"a": [{"numeric": [">", "1"]}]},
        {"a": [{"exists": "yes"}]},
        {"a": [{"anything-but": []}]},
        {"a": [{"anything-but": {"suffix": "x"}}]},
        {"a": [{"wildcard": "x*"}]},
        {"a": [{"prefix": "x", "exists": True}]},
        {f"k{i}": ["v"] for i in range(11)},
        {"a": ["v"] * 151},
    ],
)
def test_bad_policies_are_refused(policy: object) -> None:
    with pytest.raises(InvalidInput):
        compile_policy(policy)
