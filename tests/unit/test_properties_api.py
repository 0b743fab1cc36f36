"""Property tests of the API's wire parsers and codecs (:mod:`dynaq.api.params`,
:mod:`dynaq.api.codec`).

The property of a parser: on any input it returns a value in its range or
raises :class:`~dynaq.errors.InvalidInput`, never anything else (anything else
would be a 500). Plus round trips: what a client sends for a value parses back
to that value.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from typing import Any, TypeVar
from unittest import mock

import msgpack
import pytest
from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.test_utils import make_mocked_request
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaq.api import params
from dynaq.api.codec import body_from_wire, body_to_json, parse_json, read_body
from dynaq.core.ids import MAX_ID
from dynaq.core.messages import MAX_ATTRIBUTES, TYPES_ATTRIBUTE, NewMessage
from dynaq.errors import InvalidInput, UnsupportedMediaType

T = TypeVar("T")

PROPS = settings(max_examples=200, deadline=None)

# Values as a JSON or msgpack decoder hands them over, and beyond: huge
# integers, NaN and infinities, lone surrogates, bytes.
_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=12)
    | st.binary(max_size=12)
)
values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
id_texts = (
    st.integers(min_value=-10, max_value=MAX_ID + 10).map(str)
    | st.text(alphabet="0123456789 ,+-\t²١𝟙e.x", max_size=24)  # noqa: RUF001 - look-alike digits
    | st.text(max_size=24)
)
_MEMBERS = ["body", "encoding", "attributes", "group", "dedup_id", "messages", "ids"]


def member_maps(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects whose keys are mostly the members the parsers look for."""
    return st.dictionaries(st.sampled_from(_MEMBERS) | st.text(max_size=4), inner, max_size=6)


def in_range_or_invalid(fn: Callable[[], T]) -> T | None:
    """Run ``fn``; None when it raised InvalidInput, its value otherwise (any other
    exception fails the test)."""
    try:
        return fn()
    except InvalidInput:
        return None


# params ----------------------------------------------------------------------


@PROPS
@given(id_texts)
def test_parse_id_in_range_or_invalid(text: str) -> None:
    value = in_range_or_invalid(lambda: params.parse_id(text))
    assert value is None or 0 <= value <= MAX_ID


@PROPS
@given(st.integers(min_value=0, max_value=MAX_ID), st.sampled_from(["", " ", "\t"]))
def test_parse_id_round_trip(n: int, pad: str) -> None:
    assert params.parse_id(f"{pad}{n}{pad}") == n


@PROPS
@given(id_texts)
def test_id_list_in_range_or_invalid(text: str) -> None:
    ids = in_range_or_invalid(lambda: params.id_list(text, 1000))
    assert ids is None or (ids and all(0 <= i <= MAX_ID for i in ids))


@PROPS
@given(
    st.lists(st.integers(min_value=0, max_value=MAX_ID), min_size=1, max_size=20),
    st.sampled_from([",", " ", "+", ", ", "  "]),
)
def test_id_list_round_trip(ids: list[int], sep: str) -> None:
    assert params.id_list(sep.join(map(str, ids)), 20) == ids


@PROPS
@given(st.integers(min_value=1, max_value=50), st.integers(min_value=1, max_value=50))
def test_id_list_refuses_more_ids_than_a_batch(n: int, max_ids: int) -> None:
    text = ",".join(str(i) for i in range(n))
    if n <= max_ids:
        assert params.id_list(text, max_ids) == list(range(n))
    else:
        with pytest.raises(InvalidInput, match=f"at most {max_ids} message ids"):
            params.id_list(text, max_ids)


@PROPS
@given(id_texts, st.integers(min_value=1, max_value=10_000))
def test_batch_size_in_range_or_invalid(text: str, max_batch: int) -> None:
    n = in_range_or_invalid(lambda: params.batch_size(text, max_batch))
    assert n is None or 1 <= n <= max_batch
    if text.isascii() and text.isdigit() and 1 <= int(text) <= max_batch:
        assert n == int(text)


@PROPS
@given(
    st.dictionaries(st.sampled_from(["n", "m"]), id_texts, max_size=2),
    st.integers(min_value=0, max_value=MAX_ID),
    st.integers(min_value=0, max_value=MAX_ID),
)
def test_query_int_in_range_or_invalid(query: dict[str, str], a: int, b: int) -> None:
    lo, hi = min(a, b), max(a, b)
    n = in_range_or_invalid(lambda: params.query_int(query, "n", lo, lo, hi))
    if "n" not in query:
        assert n == lo
    else:
        assert n is None or lo <= n <= hi


def _check_new_messages(body: Any, binary: bool, max_batch: int) -> None:
    def parse() -> list[NewMessage]:
        return params.new_messages(params.body_object(body), binary, max_batch)

    messages = in_range_or_invalid(parse)
    if messages is not None:
        assert 1 <= len(messages) <= max_batch
        for m in messages:
            assert isinstance(m.body, bytes)
            assert m.attributes is None or (
                len(m.attributes) <= MAX_ATTRIBUTES
                and all(isinstance(k, str) and isinstance(v, str) for k, v in m.attributes.items())
            )
            assert m.group is None or isinstance(m.group, str)
            assert m.dedup_id is None or isinstance(m.dedup_id, str)


@PROPS
@given(values | member_maps(values), st.booleans(), st.integers(min_value=1, max_value=50))
def test_new_messages_in_range_or_invalid(body: Any, binary: bool, max_batch: int) -> None:
    _check_new_messages(body, binary, max_batch)


@PROPS
@given(
    st.dictionaries(st.sampled_from(["messages"]), st.lists(member_maps(values), max_size=4)),
    st.booleans(),
)
def test_new_messages_items_in_range_or_invalid(body: dict[str, Any], binary: bool) -> None:
    """The same, with arrays of message-like objects (the likelier shape)."""
    _check_new_messages(body, binary, 10)


_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=16)
# Any name but `aws.types`, whose value must be well formed (its own tests check
# that); Hypothesis draws string constants from the code under test, so it does
# draw that name. An empty name is refused (its own test checks that).
_attribute_names = _text.filter(lambda k: k not in (TYPES_ATTRIBUTE, ""))
new_message = st.builds(
    NewMessage,
    body=st.binary(max_size=32),
    attributes=st.none() | st.dictionaries(_attribute_names, _text, max_size=MAX_ATTRIBUTES),
    group=st.none() | _text,
    dedup_id=st.none() | _text,
)


def _wire(m: NewMessage, binary: bool) -> dict[str, Any]:
    """A message as a client sends it: raw bytes in msgpack, body_to_json in JSON."""
    item: dict[str, Any] = {"body": m.body} if binary else body_to_json(m.body)
    for name in ("attributes", "group", "dedup_id"):
        if getattr(m, name) is not None:
            item[name] = getattr(m, name)
    return item


@PROPS
@given(st.lists(new_message, min_size=1, max_size=8), st.booleans())
def test_new_messages_round_trip(messages: list[NewMessage], binary: bool) -> None:
    body = {"messages": [_wire(m, binary) for m in messages]}
    if binary:  # through msgpack itself, as the route reads it
        body = msgpack.unpackb(msgpack.packb(body, use_bin_type=True), raw=False)
    else:
        body = json.loads(json.dumps(body))
    assert params.new_messages(body, binary, 8) == messages


@pytest.mark.parametrize("binary", [False, True])
def test_an_empty_attribute_name_is_refused(binary: bool) -> None:
    item = {"body": b"x" if binary else "x", "attributes": {"": "v", "k": "v"}}
    with pytest.raises(InvalidInput, match=r"messages\[0\]\.attributes: a name must not be empty"):
        params.new_messages({"messages": [item]}, binary, 8)


@PROPS
@given(
    values | member_maps(values) | st.fixed_dictionaries({"ids": st.lists(values | id_texts)}),
    st.integers(min_value=1, max_value=20),
)
def test_ids_member_in_range_or_invalid(body: Any, max_batch: int) -> None:
    ids = in_range_or_invalid(lambda: params.ids_member(params.body_object(body), max_batch))
    assert ids is None or (1 <= len(ids) <= max_batch and all(0 <= i <= MAX_ID for i in ids))


@PROPS
@given(st.lists(st.integers(min_value=0, max_value=MAX_ID), min_size=1, max_size=20), st.booleans())
def test_ids_member_round_trip(ids: list[int], as_text: bool) -> None:
    wire = [str(i) for i in ids] if as_text else ids
    assert params.ids_member({"ids": wire}, 20) == ids


@PROPS
@given(st.dictionaries(st.sampled_from(["s", "t"]), values, max_size=2))
def test_seconds_finite_or_invalid(body: dict[str, Any]) -> None:
    s = in_range_or_invalid(lambda: params.optional_seconds(body, "s"))
    if s is not None:
        assert isinstance(s, float) and math.isfinite(s)
    elif body.get("s") is None:  # absent or null: no value, no error
        assert params.optional_seconds(body, "s") is None
        assert in_range_or_invalid(lambda: params.required_seconds(body, "s")) is None
    r = in_range_or_invalid(lambda: params.required_seconds(body, "s"))
    assert r is None or (isinstance(r, float) and math.isfinite(r))


@PROPS
@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**60), 2**60))
def test_seconds_round_trip(value: float) -> None:
    assert params.optional_seconds(json.loads(json.dumps({"s": value})), "s") == float(value)


@PROPS
@given(st.dictionaries(st.sampled_from(["max_messages", "x"]), values, max_size=2))
def test_max_messages_int_or_invalid(body: dict[str, Any]) -> None:
    n = in_range_or_invalid(lambda: params.max_messages(body))
    assert n is None or (isinstance(n, int) and not isinstance(n, bool))
    if "max_messages" not in body:
        assert n == 1


# codec -------------------------------------------------------------------------


@PROPS
@given(
    st.binary(max_size=64) | st.text(max_size=32).map(lambda t: t.encode("utf-8", "surrogatepass"))
)
def test_parse_json_value_or_invalid(raw: bytes) -> None:
    in_range_or_invalid(lambda: parse_json(raw))


@PROPS
@given(values)
def test_parse_json_round_trip(value: Any) -> None:
    """What json.dumps writes parses back, unless it holds what JSON cannot
    (NaN, infinities) or UTF-8 cannot (lone surrogates): those are InvalidInput."""
    try:
        raw = json.dumps(value, allow_nan=True).encode()
    except TypeError:  # bytes: not JSON
        return
    parsed = in_range_or_invalid(lambda: parse_json(raw))
    if parsed is not None:
        assert json.dumps(parsed, sort_keys=True) == json.dumps(json.loads(raw), sort_keys=True)


_packable = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | _text
    | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)


async def _read_body(raw: bytes, content_type: str) -> Any:
    payload = StreamReader(mock.Mock(_reading_paused=False), 2**16, loop=asyncio.get_running_loop())
    payload.feed_data(raw)
    payload.feed_eof()
    headers = {"Content-Type": content_type, "Content-Length": str(len(raw))}
    request = make_mocked_request(
        "POST", "/", headers=headers, payload=payload, app=web.Application()
    )
    return await read_body(request)


_CONTENT_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "application/msgpack",
    "application/x-msgpack",
    "application/vnd.msgpack",
    "text/plain",
    "application/octet-stream",
    "",
]


@PROPS
@given(
    st.binary(max_size=64) | _packable.map(lambda v: msgpack.packb(v, use_bin_type=True)),
    st.sampled_from([*_CONTENT_TYPES, "text/html", "multipart/form-data"]),
)
def test_read_body_value_or_invalid(raw: bytes, content_type: str) -> None:
    try:
        asyncio.run(_read_body(raw, content_type))
    except UnsupportedMediaType:
        assert content_type.split(";")[0] not in _CONTENT_TYPES
    except InvalidInput:
        pass


@PROPS
@given(_packable)
def test_read_body_msgpack_round_trip(value: Any) -> None:
    raw = msgpack.packb(value, use_bin_type=True)
    assert asyncio.run(_read_body(raw, "application/msgpack")) == value


@PROPS
@given(st.binary(max_size=64))
def test_body_json_round_trip(body: bytes) -> None:
    wire = body_to_json(body)
    assert set(wire) <= {"body", "encoding"}
    assert body_from_wire(json.loads(json.dumps(wire)), False, "m") == body
    assert body_from_wire({"body": body}, True, "m") == body


@PROPS
@given(member_maps(values), st.booleans())
def test_body_from_wire_bytes_or_invalid(item: dict[str, Any], binary: bool) -> None:
    body = in_range_or_invalid(lambda: body_from_wire(item, binary, "m"))
    assert body is None or isinstance(body, bytes)
