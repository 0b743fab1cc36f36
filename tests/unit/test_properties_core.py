"""Property tests of the core codecs and parsers: hints (node to node), stored
messages, batch item ids.

Parsers return a value in range or raise their one error type (hints and item
ids: :class:`~dynaq.errors.InvalidInput`; a stored message:
:class:`~dynaq.errors.StorageError`), never anything else; encoders round-trip.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaq.core.batch_items import MAX_BATCH_ID, ItemRef, item_id, parse_batch_id, parse_item_id
from dynaq.core.hints import (
    HandoverEntry,
    HintsMessage,
    QueueHints,
    decode_hints,
    encode_hints,
)
from dynaq.core.ids import LANES, MAX_ID
from dynaq.core.messages import Message, NewMessage, decode, encode
from dynaq.errors import InvalidInput, StorageError

PROPS = settings(max_examples=200, deadline=None)

_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12)
_ids = st.integers(min_value=0, max_value=MAX_ID)
# What a msgpack decoder can hand over: every type it knows, nested.
_msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | _text
    | st.binary(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(_text | st.integers(-5, 5), inner, max_size=4)
    ),
    max_leaves=16,
)


# hints ---------------------------------------------------------------------------

_queue_hints = st.builds(
    QueueHints,
    deleted=st.lists(_ids, max_size=5).map(tuple),
    lanes=st.lists(st.integers(min_value=0, max_value=LANES - 1), max_size=5).map(tuple),
)
_entry = st.builds(
    HandoverEntry,
    message_id=_ids,
    seconds_left=st.floats(min_value=0, max_value=43_200),
    receive_count=st.integers(min_value=0, max_value=2**31),
    group=st.none() | _text,
    attributes=st.none() | st.dictionaries(_text, _text, max_size=3),
)
_names = _text.filter(bool)
hints_messages = st.builds(
    HintsMessage,
    queues=st.dictionaries(_names, _queue_hints, max_size=3),
    handover=st.dictionaries(_names, st.lists(_entry, max_size=3).map(tuple), max_size=3),
)


@PROPS
@given(hints_messages)
def test_hints_round_trip(message: HintsMessage) -> None:
    assert decode_hints(encode_hints(message)) == message


def _check_hints(raw: bytes) -> None:
    try:
        message = decode_hints(raw)
    except InvalidInput:
        return
    for name, hints in message.queues.items():
        assert isinstance(name, str) and name
        assert all(0 <= i <= MAX_ID for i in hints.deleted)
        assert all(0 <= lane < LANES for lane in hints.lanes)
    for name, entries in message.handover.items():
        assert isinstance(name, str) and name
        for e in entries:
            assert 0 <= e.message_id <= MAX_ID
            assert math.isfinite(e.seconds_left) and 0 <= e.seconds_left <= 43_200
            assert 0 <= e.receive_count <= 2**31


@PROPS
@given(st.binary(max_size=64))
def test_hints_from_any_bytes(raw: bytes) -> None:
    _check_hints(raw)


_hint_like = st.fixed_dictionaries(
    {},
    optional={
        "queues": st.dictionaries(
            _text | st.integers(-2, 2),
            st.fixed_dictionaries(
                {},
                optional={"deleted": _msgpack_values, "lanes": _msgpack_values},
            )
            | _msgpack_values,
            max_size=3,
        ),
        "handover": st.dictionaries(
            _text | st.integers(-2, 2),
            st.lists(st.lists(_msgpack_values, max_size=6) | _msgpack_values, max_size=3),
            max_size=3,
        ),
    },
)


@PROPS
@given(_hint_like | _msgpack_values)
def test_hints_from_any_msgpack_value(value: Any) -> None:
    """Well-formed msgpack of every shape (the likelier input from a confused peer)."""
    _check_hints(msgpack.packb(value, use_bin_type=True))


def test_hints_from_deep_nesting() -> None:
    with pytest.raises(InvalidInput):
        decode_hints(b"\x91" * 100_000)


# stored messages -------------------------------------------------------------------

_new_messages = st.builds(
    NewMessage,
    body=st.binary(max_size=256),
    attributes=st.none() | st.dictionaries(_text, _text, max_size=4),
    group=st.none() | _text,
    dedup_id=st.none() | _text,
)


@PROPS
@given(
    _new_messages,
    _ids,
    st.integers(min_value=0, max_value=2**62),
    st.booleans(),
    st.integers(0, 100),
)
def test_message_round_trip(
    msg: NewMessage, mid: int, enqueued_ms: int, compress: bool, receive_count: int
) -> None:
    stored = encode(msg, enqueued_ms, compress)
    assert decode(mid, stored, receive_count) == Message(
        mid, msg.body, enqueued_ms, msg.attributes, receive_count, msg.group
    )


@PROPS
@given(st.binary(max_size=64) | _msgpack_values.map(lambda v: msgpack.packb(v, use_bin_type=True)))
def test_corrupt_stored_message_is_a_storage_error(raw: bytes) -> None:
    """A corrupt value is the store's fault: StorageError, never a crash elsewhere."""
    with contextlib.suppress(StorageError):
        decode(7, raw)


# batch item ids ------------------------------------------------------------------

_id_texts = (
    st.integers(min_value=-5, max_value=MAX_BATCH_ID + 5).map(str)
    | st.text(alphabet="0123456789 -+²", max_size=22)
    | st.text(max_size=22)
)


@PROPS
@given(_id_texts)
def test_parse_batch_id_in_range_or_invalid(text: str) -> None:
    try:
        n = parse_batch_id(text)
    except InvalidInput:
        return
    assert 0 <= n <= MAX_BATCH_ID


@PROPS
@given(st.integers(min_value=0, max_value=MAX_BATCH_ID))
def test_parse_batch_id_round_trip(n: int) -> None:
    assert parse_batch_id(str(n)) == n


@PROPS
@given(
    _msgpack_values
    | st.text(max_size=60)
    | st.tuples(_id_texts, st.uuids().map(str) | _text, _id_texts).map(":".join)
)
def test_parse_item_id_in_range_or_invalid(value: Any) -> None:
    try:
        ref = parse_item_id(value)
    except InvalidInput:
        return
    assert 0 <= ref.batch_id <= MAX_BATCH_ID
    assert isinstance(ref.block, uuid.UUID)
    assert 0 <= ref.index < 10**10


@PROPS
@given(
    st.integers(min_value=0, max_value=MAX_BATCH_ID),
    st.uuids(),
    st.integers(min_value=0, max_value=10**10 - 1),
)
def test_item_id_round_trip(batch_id: int, block: uuid.UUID, index: int) -> None:
    assert parse_item_id(item_id(batch_id, block, index)) == ItemRef(batch_id, block, index)
