"""The message a peer's receive answers with survives the wire whole, and a peer of an
older version (eight fields, no first-receive time) is still understood."""

from __future__ import annotations

import pytest

from dynaq.core.messages import DeadLetterOrigin, Message
from dynaq.core.peer_receive import message_from_wire, message_to_wire
from dynaq.errors import InvalidInput


def test_a_forwarded_message_keeps_every_field_its_first_receive_time_too() -> None:
    m = Message(
        7,
        b"body",
        1_790_000_000_000,
        {"k": "v"},
        3,
        "g",
        DeadLetterOrigin("src", 5, 4, 1_789_999_999_000, 1_790_000_000_500),
        2,
        1_790_000_001_234,
    )
    assert message_from_wire(message_to_wire(m)) == m


def test_an_older_peers_eight_fields_mean_the_first_receive_is_unknown() -> None:
    m = Message(7, b"x", 1_790_000_000_000, None, 1, None, None, 1, 1_790_000_001_000)
    got = message_from_wire(message_to_wire(m)[:8])
    assert got.first_received_ms == 0 and got.id == 7 and got.delivery == 1


@pytest.mark.parametrize(
    "raw", [[], [1, b"x", 2], "nonsense", [1, b"x", 2, None, 1, None, 1, None, "late"]]
)
def test_a_malformed_forwarded_message_is_invalid_input(raw: object) -> None:
    with pytest.raises(InvalidInput):
        message_from_wire(raw)
