"""SNS-grammar filter policies: each rule kind, AND across names, OR within one, bad input;
the same rules over JSON bodies (payload-based filtering)."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dynaq.core import filters
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
        {"a": [[1]]},
        {"a": [{"x": 1}]},
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
        {"a": [{"anything-but": {"wildcard": "x*"}}]},
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


# -- suffix, equals-ignore-case, cidr, anything-but suffix, JSON literals, $or, SNS's limits


@pytest.mark.parametrize(
    ("rule", "value", "expected"),
    [
        ({"suffix": "ed"}, "red", True),
        ({"suffix": "ed"}, "redo", False),
        ({"suffix": ""}, "x", True),
        ({"equals-ignore-case": "RED"}, "red", True),
        ({"equals-ignore-case": "RED"}, "Red", True),
        ({"equals-ignore-case": "RED"}, "reds", False),
        ({"anything-but": {"suffix": "ed"}}, "red", False),
        ({"anything-but": {"suffix": "ed"}}, "blue", True),
        ({"cidr": "10.0.0.0/24"}, "10.0.0.255", True),
        ({"cidr": "10.0.0.0/24"}, "10.0.1.0", False),
        ({"cidr": "10.0.0.7/24"}, "10.0.0.1", True),  # host bits set: the block still
        ({"cidr": "10.0.0.0/24"}, "not an ip", False),
        ({"cidr": "10.0.0.0/24"}, "::ffff:10.0.0.1", False),  # IPv6 is not in an IPv4 block
        ({"cidr": "2001:db8::/32"}, "2001:db8::1", True),
        ({"cidr": "2001:db8::/32"}, "2001:db9::1", False),
        ({"cidr": "2001:db8::/32"}, "10.0.0.1", False),
        ({"numeric": ["<=", 1_000_000_000]}, "1000000000", True),
        ({"numeric": [">", -1_000_000_000, "<", 0.00001]}, "0.000009", True),
        (True, "true", False),  # a String attribute is a string, never a JSON literal
        (None, "null", False),
    ],
)
def test_string_and_address_rules_on_attributes(rule: object, value: str, expected: bool) -> None:
    assert compile_policy({"c": [rule]})({"c": value}) is expected


@pytest.mark.parametrize(
    ("rule", "items", "expected"),
    [
        ({"suffix": "ed"}, ["blue", "red"], True),
        ({"suffix": "ed"}, [1, True], False),
        ({"equals-ignore-case": "X"}, ["y", "x"], True),
        ({"cidr": "192.168.0.0/16"}, ["8.8.8.8", "192.168.4.4"], True),
        ({"cidr": "192.168.0.0/16"}, [1], False),
        ({"anything-but": {"suffix": "ed"}}, ["red", "bed"], False),
        ({"anything-but": {"suffix": "ed"}}, ["red", "blue"], True),
        (True, [False, True], True),
        (True, [1], False),  # 1 == True in Python, not in JSON
        (False, [0, "false"], False),
        (None, [None], True),
        (None, ["null"], False),
        (1, [True], False),
    ],
)
def test_new_rules_on_string_array_elements(
    rule: object, items: list[object], expected: bool
) -> None:
    assert compile_policy({"a": [rule]})(_array(items)) is expected


@pytest.mark.parametrize(
    ("policy", "body", "expected"),
    [
        ({"c": [{"suffix": "ed"}]}, {"c": "red"}, True),
        ({"c": [{"suffix": "ed"}]}, {"c": 10}, False),
        ({"o": {"c": [{"equals-ignore-case": "RED"}]}}, {"o": {"c": "rEd"}}, True),
        ({"o": {"c": [{"equals-ignore-case": "RED"}]}}, {"o": {"c": "blue"}}, False),
        ({"c": [{"anything-but": {"suffix": "ed"}}]}, {"c": ["red", "blue"]}, True),
        ({"c": [{"anything-but": {"suffix": "ed"}}]}, {"c": "red"}, False),
        ({"ip": [{"cidr": "10.0.0.0/24"}]}, {"ip": "10.0.0.9"}, True),
        ({"ip": [{"cidr": "10.0.0.0/24"}]}, {"ip": ["1.1.1.1", "10.0.0.9"]}, True),
        ({"ip": [{"cidr": "fe80::/10"}]}, {"ip": "fe80::1"}, True),
        ({"ip": [{"cidr": "10.0.0.0/24"}]}, {"ip": 167772161}, False),  # a number is no address
        ({"flag": [True]}, {"flag": True}, True),
        ({"flag": [True]}, {"flag": False}, False),
        ({"flag": [True]}, {"flag": "true"}, False),
        ({"flag": [True]}, {"flag": 1}, False),
        ({"flag": [False]}, {"flag": 0}, False),
        ({"flag": [False]}, {"flag": [True, False]}, True),
        ({"flag": [None]}, {"flag": None}, True),
        ({"flag": [None]}, {}, False),  # null matches a null, not a missing key
        ({"flag": [None]}, {"flag": "null"}, False),
        ({"a": {"b": [True]}}, {"a": [{"b": False}, {"b": True}]}, True),
    ],
)
def test_new_rules_on_bodies(policy: dict[str, Any], body: object, expected: bool) -> None:
    assert compile_body_policy(policy)(json.dumps(body).encode()) is expected
    assert filters.compile_body_matcher(policy, 5)(body) is expected


OR_TOP = {"$or": [{"c": ["red"]}, {"n": [{"numeric": [">", 10]}]}]}
# SNS's documented example: source && (metricName || (metricType && (metricId || spaceId)))
OR_NESTED = {
    "source": ["aws.cloudwatch"],
    "$or": [
        {"metricName": ["CPUUtilization"]},
        {"metricType": ["MetricType"], "$or": [{"metricId": [1234]}, {"spaceId": [1000]}]},
    ],
}


@pytest.mark.parametrize(
    ("policy", "attrs", "expected"),
    [
        (OR_TOP, {"c": "red"}, True),
        (OR_TOP, {"n": "11"}, True),
        (OR_TOP, {"c": "blue", "n": "11"}, True),
        (OR_TOP, {"c": "blue", "n": "10"}, False),
        (OR_TOP, {}, False),
        (OR_NESTED, {"source": "aws.cloudwatch", "metricName": "CPUUtilization"}, True),
        (
            OR_NESTED,
            {"source": "aws.cloudwatch", "metricType": "MetricType", "spaceId": "1000"},
            True,
        ),
        (OR_NESTED, {"source": "aws.cloudwatch", "metricType": "MetricType"}, False),
        (OR_NESTED, {"source": "aws.cloudwatch", "spaceId": "1000"}, False),
        (OR_NESTED, {"source": "aws.events", "metricName": "CPUUtilization"}, False),
        # Not an OR as SNS reads it (one alternative): a key named "$or"
        ({"$or": ["x"]}, {"$or": "x"}, True),
        ({"$or": [{"exists": True}]}, {"$or": "x"}, True),  # an object naming a rule: a rule
        ({"$or": [{"exists": True}]}, {"a": "x"}, False),
    ],
)
def test_or_on_attributes(policy: dict[str, Any], attrs: dict[str, str], expected: bool) -> None:
    assert compile_policy(policy)(attrs) is expected


@pytest.mark.parametrize(
    ("policy", "body", "expected"),
    [
        (OR_TOP, {"c": "red"}, True),
        (OR_TOP, {"c": "blue", "n": 11}, True),
        (OR_TOP, {"c": "blue", "n": "11"}, False),  # body values keep their JSON types
        (
            OR_NESTED,
            {"source": "aws.cloudwatch", "metricType": "MetricType", "metricId": 1234},
            True,
        ),
        (OR_NESTED, {"source": "aws.cloudwatch", "metricType": "MetricType", "metricId": 1}, False),
        # a $or inside a key reads the keys under it
        ({"o": {"$or": [{"c": ["red"]}, {"d": {"e": [1]}}]}}, {"o": {"c": "red"}}, True),
        ({"o": {"$or": [{"c": ["red"]}, {"d": {"e": [1]}}]}}, {"o": {"d": {"e": 1}}}, True),
        ({"o": {"$or": [{"c": ["red"]}, {"d": {"e": [1]}}]}}, {"o": {"e": 1}}, False),
        ({"o": {"$or": [{"c": ["red"]}, {"d": {"e": [1]}}]}}, {"c": "red"}, False),
        (
            {"o": {"$or": [{"c": ["red"]}, {"c": ["blue"]}]}},
            {"o": [{"c": "x"}, {"c": "blue"}]},
            True,
        ),
        ({"$or": [{"a": [True]}, {"b": [None]}]}, {"b": None}, True),
        ({"$or": [{"a": [True]}, {"b": [None]}]}, {"a": False}, False),
    ],
)
def test_or_on_bodies(policy: dict[str, Any], body: object, expected: bool) -> None:
    assert filters.compile_body_matcher(policy, 5)(body) is expected


def _refusal(policy: object, *, body: bool = False) -> str:
    with pytest.raises(InvalidInput) as exc:
        if body:
            filters.compile_body_matcher(policy, 5)
        else:
            compile_policy(policy)
    return exc.value.message


@pytest.mark.parametrize(
    ("policy", "text"),
    [
        ({f"k{i}": ["v"] for i in range(6)}, "filter_policy has 6 keys .* at most 5"),
        (
            {
                "a": ["x"],
                "b": ["x"],
                "c": ["x"],
                "$or": [{"d": ["x"]}, {"e": ["x"], "f": ["x"], "g": ["x"]}],
            },
            "filter_policy has 6 keys",
        ),
        ({"a": ["v"] * 151}, "filter_policy makes 151 combinations .* at most 150"),
        ({"a": ["v"] * 13, "b": ["v"] * 12}, "makes 156 combinations"),
        # a $or adds its alternatives' combinations: 10 x (10 + 6) = 160
        ({"a": ["v"] * 10, "$or": [{"b": ["v"] * 10}, {"c": ["v"] * 6}]}, "makes 160 combinations"),
        (
            {"c": [{"numeric": [">", 1_000_000_001]}]},
            r"filter_policy.c: numeric > 1000000001 is outside",
        ),
        (
            {"c": [{"numeric": [">", 0, "<", 1e10]}]},
            r"filter_policy.c: numeric < 10000000000.0 is outside",
        ),
        (
            {"c": [{"numeric": ["=", 0.000001]}]},
            r"filter_policy.c: numeric = 1e-06 has more than 5 digits",
        ),
        ({"c": [-2_000_000_000]}, "filter_policy.c: a number -2000000000 is outside"),
        ({"c": [1.123456]}, "filter_policy.c: a number 1.123456 has more than 5 digits"),
        ({"c": [{"anything-but": [10**12]}]}, "filter_policy.c: a number 1000000000000 is outside"),
        ({"c": [{"anything-but": [True]}]}, '"anything-but" takes strings and numbers, not True'),
        ({"c": [{"anything-but": {"equals-ignore-case": "X"}}]}, 'an "anything-but" object is'),
        ({"c": [{"anything-but": {"suffix": 1}}]}, '"anything-but" suffix takes a string'),
        ({"c": [{"suffix": 1}]}, 'filter_policy.c: "suffix" takes a string'),
        ({"c": [{"equals-ignore-case": ["x"]}]}, '"equals-ignore-case" takes a string'),
        ({"ip": [{"cidr": "10.0.0.1"}]}, r'filter_policy.ip: "cidr" takes an address block'),
        ({"ip": [{"cidr": 10}]}, '"cidr" takes an address block'),
        ({"ip": [{"cidr": "10.0.0.300/24"}]}, "\"cidr\" '10.0.0.300/24' is no IP address block"),
        ({"ip": [{"cidr": "10.0.0.0/33"}]}, "is no IP address block"),
        (
            {"c": [{"wildcard": "x*"}]},
            "unknown rule 'wildcard'; use prefix, suffix, equals-ignore-case",
        ),
        ({"$or": [{"a": ["x"]}, {}]}, "filter_policy must be a non-empty object of keys"),
        (
            {"$or": [{"a": {"b": ["x"]}}, {"c": ["x"]}]},
            "filter_policy.a must be a non-empty array of rules",
        ),
    ],
)
def test_limits_and_bad_rules_are_refused_precisely(policy: object, text: str) -> None:
    assert __import__("re").search(text, _refusal(policy)), _refusal(policy)


def test_limits_allow_what_sns_allows() -> None:
    compile_policy({f"k{i}": ["v"] for i in range(5)})
    compile_policy({"a": ["v"] * 150})
    compile_policy({"a": ["v"] * 15, "b": ["v"] * 10})
    compile_policy({"c": [{"numeric": [">=", -1_000_000_000, "<=", 1_000_000_000]}, 0.00001]})
    # four keys beside a $or whose alternatives have one each: five keys
    compile_policy(
        {"a": ["x"], "b": ["x"], "c": ["x"], "d": ["x"], "$or": [{"e": ["x"]}, {"f": ["x"]}]}
    )
    # SNS's documented example: 4 x (2 + 1 x (2 + 3)) = 28 combinations
    compile_policy(
        {
            "source": ["aws.cloudwatch", "aws.events", "aws.test", "aws.test2"],
            "$or": [
                {"metricName": ["CPUUtilization", "ReadLatency"]},
                {
                    "metricType": ["MetricType"],
                    "$or": [{"metricId": [1234, 4321]}, {"spaceId": [1000, 2000, 3000]}],
                },
            ],
        }
    )


def test_body_limits_count_as_sns_documents() -> None:
    # Only top-level keys count: one key holding six nested ones is one key.
    filters.compile_body_matcher({"a": {f"k{i}": ["v"] for i in range(6)}}, 5)
    assert "has 6 keys" in _refusal({f"k{i}": {"v": ["x"]} for i in range(6)}, body=True)
    # SNS's documented example: 4 values three keys deep, 3 two deep: 3 x 4 x 2 x 3 = 72
    doc_example = {
        "key_a": {"key_b": {"key_c": ["v1", "v2", "v3", "v4"]}},
        "key_d": {"key_e": ["v1", "v2", "v3"]},
    }
    filters.compile_body_matcher(doc_example, 5)
    deeper = {"key_a": {"key_b": {"key_c": ["v"] * 7}}, "key_d": {"key_e": ["v"] * 4}}
    assert "makes 168 combinations" in _refusal(deeper, body=True)  # 7 x 3 x 4 x 2
    assert "keys nest at most 5 deep" in _refusal(
        {"a": {"b": {"c": {"d": {"e": {"f": ["x"]}}}}}}, body=True
    )
    assert "attribute policies do not nest" in _refusal({"a": {"b": ["x"]}})


def test_or_nests_only_so_deep() -> None:
    policy: dict[str, Any] = {"a": ["x"]}
    for _ in range(6):
        policy = {"$or": [policy, {"a": ["y"]}]}
    assert '"$or" nests at most 5 deep' in _refusal(policy)


_text = st.text(alphabet="abcAB\u00df\u0130", max_size=6)


@given(value=_text, suffix=_text)
def test_suffix_is_endswith(value: str, suffix: str) -> None:
    assert compile_policy({"a": [{"suffix": suffix}]})({"a": value}) is value.endswith(suffix)
    excluded = compile_policy({"a": [{"anything-but": {"suffix": suffix}}]})({"a": value})
    assert excluded is not value.endswith(suffix)


@given(value=_text, target=_text)
def test_equals_ignore_case_is_symmetric_and_exact_when_cased_alike(
    value: str, target: str
) -> None:
    one = compile_policy({"a": [{"equals-ignore-case": target}]})({"a": value})
    other = compile_policy({"a": [{"equals-ignore-case": value}]})({"a": target})
    assert one is other
    if value == target:
        assert one


@given(
    address=st.ip_addresses(),
    block=st.ip_addresses().flatmap(
        lambda ip: st.integers(0, ip.max_prefixlen).map(
            lambda n: ipaddress.ip_network((ip, n), strict=False)
        )
    ),
)
def test_cidr_is_ipaddress_membership(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
    block: ipaddress.IPv4Network | ipaddress.IPv6Network,
) -> None:
    got = compile_policy({"ip": [{"cidr": str(block)}]})({"ip": str(address)})
    assert got is (address.version == block.version and address in block)


_attrs = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(["x", "y", "1", "20"]))
_leaf_policies = st.dictionaries(
    st.sampled_from(["a", "b", "c"]),
    st.lists(
        st.sampled_from(["x", "y", {"numeric": [">", 5]}, {"suffix": "0"}]), min_size=1, max_size=3
    ),
    min_size=1,
    max_size=2,
)


@given(alternatives=st.lists(_leaf_policies, min_size=2, max_size=3), attrs=_attrs)
def test_or_matches_when_any_alternative_does(
    alternatives: list[dict[str, Any]], attrs: dict[str, str]
) -> None:
    expected = any(compile_policy(alt)(attrs) for alt in alternatives)
    assert compile_policy({"$or": alternatives})(attrs) is expected


def test_a_policy_stored_before_the_sns_limits_still_compiles_for_routing() -> None:
    """Policies are checked against SNS's limits when they are set; one stored when
    dynaq took more keys and any number must still route, not fail every publish."""
    from dynaq.core.filters import stored_policies

    policy = {f"k{i}": ["v"] for i in range(7)} | {"ts": [{"numeric": [">", 1.7e12]}]}
    with pytest.raises(InvalidInput):
        compile_policy(policy)
    with stored_policies():
        matches = compile_policy(policy)
    attrs = {f"k{i}": "v" for i in range(7)} | {"ts": "1800000000000"}
    assert matches(attrs) and not matches(attrs | {"ts": "1"})
    with pytest.raises(InvalidInput):  # the limits hold again outside the block
        compile_policy(policy)
