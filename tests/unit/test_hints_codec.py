"""The node-to-node hint codec, tested with bytes alone."""

from __future__ import annotations

import msgpack
import pytest

from dynaq.core.hints import HandoverEntry, HintsMessage, QueueHints, decode_hints, encode_hints
from dynaq.errors import InvalidInput


def test_round_trip() -> None:
    message = HintsMessage(
        {"q": QueueHints((1, 2**62), (0, 1023), (2**53 + 32,))},
        {"q": (HandoverEntry(5, 12.5, 3, "g", {"k": "v"}), HandoverEntry(6, 0.0, 1, None))},
    )
    assert decode_hints(encode_hints(message)) == message


def test_wire_shape_is_unchanged() -> None:
    """The shape nodes of the previous release send and expect."""
    raw = msgpack.packb(
        {"queues": {"q": {"deleted": [7], "lanes": [3]}}, "handover": {"q": [[9, 1.5, 2, None]]}}
    )
    got = decode_hints(raw)
    assert got.queues["q"] == QueueHints((7,), (3,))
    assert got.handover["q"] == (HandoverEntry(9, 1.5, 2, None),)
    carried = HandoverEntry(9, 1.5, 2, "g", {"k": "v"}, 2**59 + 3)
    again = decode_hints(
        encode_hints(HintsMessage({}, {"q": (carried,)}, "n1", ("q", "r"), handoff_from="n1"))
    )
    assert again.handover["q"] == (carried,) and again.released_by == "n1"
    assert again.recheck == ("q", "r") and again.handoff_from == "n1"
    assert decode_hints(encode_hints(HintsMessage({}, {"q": (carried,)}))).handoff_from is None
    assert decode_hints(msgpack.packb({"queues": {}})) == HintsMessage()


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",  # not msgpack
        msgpack.packb([1, 2]),
        msgpack.packb({"queues": []}),
        msgpack.packb({"queues": {"q": {"deleted": ["1"]}}}),
        msgpack.packb({"queues": {"q": {"deleted": [-1]}}}),
        msgpack.packb({"queues": {"q": {"deleted": [2**63]}}}),
        msgpack.packb({"queues": {"q": {"lanes": [1024]}}}),
        msgpack.packb({"queues": {"q": {"rewind": [2**63]}}}),
        msgpack.packb({"queues": {"q": {"lanes": [True]}}}),
        msgpack.packb({"queues": {"": {}}}),
        msgpack.packb({"queues": {1: {}}}),
        msgpack.packb({"handover": {"q": [[1, 2.0, 3]]}}),
        msgpack.packb({"handover": {"q": [[1, float("nan"), 3, None]]}}),
        msgpack.packb({"handover": {"q": [[1, -1.0, 3, None]]}}),
        msgpack.packb({"handover": {"q": [[1, 1.0, 3, 5]]}}),
        msgpack.packb({"handover": {"q": [[1, 1.0, 3, None, {"k": 1}]]}}),
        msgpack.packb({"handover": {"q": [[1, 1.0, 3, None, None, 6, 7]]}}),
        msgpack.packb({"handover": {"q": [[1, 1.0, 3, None, None, -6]]}}),
        msgpack.packb({"recheck": ["q", 5]}),
        msgpack.packb({"handover": {"q": 5}}),
        msgpack.packb({"handoff_from": 5}),
        msgpack.packb({"handoff_from": ""}),
    ],
)
def test_malformed_messages_are_invalid_input(payload: bytes) -> None:
    with pytest.raises(InvalidInput):
        decode_hints(payload)


def test_a_big_handover_goes_in_pieces_below_the_request_limit() -> None:
    from dynaq.core.hints import handover_chunks

    entries = [
        HandoverEntry(i, 10.0, 1, None, {"dynaq.batch_item": "x" * 60}) for i in range(12_345)
    ]
    chunks = handover_chunks({"a": entries[:345], "b": entries[345:]}, size=5_000)
    assert [sum(map(len, c.values())) for c in chunks] == [5_000, 5_000, 2_345]
    assert [e for c in chunks for q in ("a", "b") for e in c.get(q, ())] == entries
    assert all(len(encode_hints(HintsMessage({}, c))) < 1024 * 1024 for c in chunks)
