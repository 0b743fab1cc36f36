"""SNS-grammar filter policies: each rule kind, AND across names, OR within one, bad input;
the same rules over JSON bodies (payload-based filtering)."""

from __future__ import annotations

import json

import pytest

from dynaq.core.body_filters import compile_body_policy
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
        {"a": [{"numeric": ["<", 1, ">", 5]}]},  # the lower bound comes first
        {"a": [{"numeric": ["=", 1, "=", 2]}]},  # "=" stands alone
        {"a": [{"numeric": ["=", 1, "<", 2]}]},
        {"a": [{"numeric": [">", 5, "<", 1]}]},  # bottom must be less than top
        {"a": [{"numeric": [">", 5, "<", 5]}]},
        {"a": [{"numeric": [">", 1, ">", 2]}]},
        {"a": [{"numeric": [">", 1, "<", 5, "<", 6]}]},
        {"a": [{"numeric": [">", 1, "<"]}]},
        {"a": [{"numeric": []}]},
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


def test_numeric_errors_say_what_sns_says() -> None:
    for spec, text in [
        (["<", 1, ">", 5], "Too many elements in numeric expression"),
        (["=", 1, "=", 2], "Too many elements in numeric expression"),
        ([">", 5, "<", 1], "Bottom must be less than top"),
        ([">", 1, ">=", 2], "Bad numeric range operator: >="),
        (["!", 1], "Unrecognized numeric range operator: !"),
        ([">", "x"], "Value of > must be numeric"),
    ]:
        with pytest.raises(InvalidInput, match=text):
            compile_policy({"a": [{"numeric": spec}]})


def _array(value: object) -> dict[str, str]:
    return {"a": json.dumps(value), "aws.types": json.dumps({"a": "String.Array"})}


@pytest.mark.parametrize(
    ("rule", "attrs", "expected"),
    [
        ("x", _array(["x", "y"]), True),  # any element matching matches
        ("x", _array(["y"]), False),
        ("x", _array([]), False),
        ("x", {"a": '["x", "y"]'}, False),  # a String attribute is one string
        ('["x", "y"]', _array(["x", "y"]), False),  # an array is its elements
        (5, _array([1, 5.0]), True),
        (5, _array(["5"]), False),  # elements keep their JSON types
        ({"numeric": [">", 3]}, _array(["a", 4]), True),
        ({"numeric": [">", 3]}, _array(["4"]), False),
        ({"numeric": [">", 3]}, _array([True, None]), False),
        ({"prefix": "ru"}, _array([1, "rugby"]), True),
        ({"exists": True}, _array([None]), True),
        ({"exists": True}, _array([]), False),
        ({"exists": False}, _array([]), True),
        ({"exists": False}, _array(["x"]), False),
        ({"anything-but": ["rugby", "tennis"]}, _array(["rugby", "baseball"]), True),
        ({"anything-but": ["rugby", "tennis"]}, _array(["rugby", "tennis"]), False),
        ({"anything-but": [100, 500]}, _array([100, 50]), True),
        ({"anything-but": {"prefix": "r"}}, _array(["rugby"]), False),
        ({"anything-but": {"prefix": "r"}}, _array(["rugby", "golf"]), True),
        ("x", {"a": "[not json", "aws.types": '{"a": "String.Array"}'}, False),
        ("[not json", {"a": "[not json", "aws.types": '{"a": "String.Array"}'}, True),
        ("5", {"a": "5", "aws.types": '{"a": "Number"}'}, True),
        (5, {"a": "5.0", "aws.types": '{"a": "Number"}'}, True),
        ({"exists": True}, {"a": "eA==", "aws.types": '{"a": "Binary"}'}, False),  # ignored
        ({"exists": False}, {"a": "eA==", "aws.types": '{"a": "Binary"}'}, True),
        ("x", {"a": "x", "aws.types": "not json"}, True),
    ],
)
def test_string_array_attributes(rule: object, attrs: dict[str, str], expected: bool) -> None:
    assert compile_policy({"a": [rule]})(attrs) is expected


@pytest.mark.parametrize(
    ("policy", "body", "expected"),
    [
        ({"a": ["x"]}, {"a": "x"}, True),
        ({"a": ["x"]}, {"a": "y"}, False),
        ({"a": {"b": ["x"]}}, {"a": {"b": "x"}}, True),
        ({"a": {"b": ["x"]}}, {"a": {"c": "x"}}, False),
        ({"a": {"b": [5]}}, {"a": {"b": 5}}, True),
        ({"a": {"b": [5]}}, {"a": {"b": 5.0}}, True),
        # JSON types are kept: a number never equals a string, nor a boolean a string
        ({"a": [100]}, {"a": "100"}, False),
        ({"a": ["100"]}, {"a": 100}, False),
        ({"a": [{"numeric": [">", 1]}]}, {"a": "2"}, False),
        ({"a": ["true"]}, {"a": True}, False),
        ({"a": [{"prefix": "1"}]}, {"a": 10}, False),
        ({"a": {"b": [{"numeric": [">", 1.5]}]}}, {"a": {"b": 2}}, True),
        ({"a": [{"numeric": ["<", 0]}]}, {"a": "x"}, False),
        ({"tags": ["red"]}, {"tags": ["blue", "red"]}, True),  # any element of an array
        ({"tags": ["red"]}, {"tags": []}, False),
        ({"a": {"b": ["x"]}}, {"a": [{"b": "y"}, {"b": "x"}]}, True),  # arrays on the way
        ({"k": [{"exists": False}]}, {}, True),
        ({"k": [{"exists": False}]}, {"k": []}, True),
        ({"k": [{"exists": False}]}, {"k": None}, False),  # null is present
        ({"k": [{"exists": True}]}, {"k": None}, True),
        ({"k": [{"exists": True}]}, {"k": 0}, True),
        ({"k": [{"exists": True}]}, {"k": False}, True),
        ({"k": [{"exists": True}]}, {"k": {"nested": 1}}, False),  # an object is no value
        ({"k": [{"anything-but": "x"}]}, {"k": "y"}, True),
        ({"k": [{"anything-but": "x"}]}, {}, False),
        # as SNS documents it: an array matches when any element is not excluded
        ({"k": [{"anything-but": "x"}]}, {"k": ["y", "x"]}, True),
        ({"k": [{"anything-but": "x"}]}, {"k": ["x", "x"]}, False),
        ({"k": [{"anything-but": "x"}]}, {"k": ["y", "z"]}, True),
        ({"k": [{"anything-but": 5}]}, {"k": "5"}, True),
        ({"k": [{"anything-but": {"prefix": "tmp"}}]}, {"k": "tmp1"}, False),
        ({"a": ["x"], "b": {"c": [{"prefix": "p"}]}}, {"a": "x", "b": {"c": "pq"}}, True),
        ({"a": ["x"], "b": {"c": [{"prefix": "p"}]}}, {"a": "x", "b": {"c": "q"}}, False),
        ({"a": {"b": {"c": {"d": {"e": ["x"]}}}}}, {"a": {"b": {"c": {"d": {"e": "x"}}}}}, True),
    ],
)
def test_body_rules(policy: dict[str, object], body: object, expected: bool) -> None:
    assert compile_body_policy(policy)(json.dumps(body).encode()) is expected


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]", b'"x"', b"\xff\xfe", b"[" * 100_000])
def test_a_body_that_is_not_a_json_object_matches_nothing(raw: bytes) -> None:
    assert compile_body_policy({"k": [{"exists": False}]})(raw) is False


@pytest.mark.parametrize(
    "policy",
    [
        {},
        {"a": {}},
        {"a": []},
        {"a": "x"},
        {"a": {"b": {"c": {"d": {"e": {"f": ["x"]}}}}}},  # 6 levels of keys: one too deep
        {"a": {"b": [{"numeric": ["~", 1]}]}},
        {"a": {"b": [{"numeric": ["<", 1, ">", 5]}]}},
        {"a": [{"numeric": ["=", 1, "=", 2]}]},
        {"a": [{"numeric": [">=", 3, "<=", 3]}]},
        {f"k{i}": {"v": ["x"]} for i in range(11)},
        {"a": {"b": ["v"] * 151}},
    ],
)
def test_bad_body_policies_are_refused(policy: object) -> None:
    with pytest.raises(InvalidInput):
        compile_body_policy(policy)
