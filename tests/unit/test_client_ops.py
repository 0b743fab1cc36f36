"""The client's requests-as-data, without a node: message wire forms and their retry
rule, received messages built on the fast path, and the stream follow decoder."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest

from dynaq.client import NewMessage, ReceivedMessage, StreamEntry
from dynaq.client.ops import Retry, wire_messages
from dynaq.client.ops_queues import enqueue
from dynaq.client.ops_streams import EntryDecoder, FollowPlan, follow_path, read_range
from dynaq.client.ops_topics import publish


def test_wire_messages_for_every_kind_of_message() -> None:
    wire, all_dedup = wire_messages(
        [b"raw", "text", NewMessage("n", {"k": "v"}, "g", "d"), {"body": b"m", "group": "h"}]
    )
    assert wire == [
        {"body": b"raw"},
        {"body": b"text"},
        {"body": b"n", "attributes": {"k": "v"}, "group": "g", "dedup_id": "d"},
        {"body": b"m", "group": "h"},
    ]
    assert all_dedup is False
    assert wire_messages([NewMessage("a", dedup_id="1"), {"body": "b", "dedup_id": "2"}])[1]
    assert wire_messages([])[1] is False
    with pytest.raises(ValueError, match="mapping with a body"):
        wire_messages([{"bdy": "typo"}])
    with pytest.raises(ValueError, match="mapping with a body"):
        wire_messages([42])  # type: ignore[list-item]


def test_an_enqueue_is_resent_only_when_every_message_is_deduplicated() -> None:
    assert [c.retry for c in enqueue("q", [b"x"] * 1500).calls] == [Retry.UNSENT] * 2
    assert enqueue("q", [NewMessage("x", dedup_id="1")]).calls[0].retry is Retry.ALWAYS
    body = enqueue("q", [b"x", b"y"]).calls[0].body
    assert body is not None and msgpack.unpackb(body) == {
        "messages": [{"body": b"x"}, {"body": b"y"}]
    }


def test_received_message_fast_path_is_the_same_object() -> None:
    m = {"id": 7, "body": b"b", "enqueued_at_ms": 5, "receive_count": 2, "attributes": {"a": "1"}}
    fast = ReceivedMessage.from_wire(m, "h:1")
    assert fast == ReceivedMessage(7, b"b", 5, 2, {"a": "1"}, None, "h:1")
    assert set(vars(fast)) == {f.name for f in dataclasses.fields(ReceivedMessage)}
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.id = 8  # type: ignore[misc]


def test_follow_decoder_takes_any_split() -> None:
    packed = b"".join(
        msgpack.packb({"index": i, "order": 10 + i, "entry": {"v": "x\ty\n" * i}}) for i in range(3)
    )
    for cut in range(len(packed)):
        d = EntryDecoder()
        got = [*d.feed(packed[:cut]), *d.feed(packed[cut:])]
        assert got == [StreamEntry(i, 10 + i, {"v": "x\ty\n" * i}) for i in range(3)]


def test_stream_request_shapes_and_bad_arguments() -> None:
    assert follow_path("a b", None, 5, None, 10, 99) == (
        "/v2/streams/a%20b?tail=5&n=10&until=99&format=msgpack"
    )
    assert read_range("s", 3, 2, None, None, None).calls[0].path == (
        "/v2/streams/s?i=3&n=2&nowait=true&format=array"
    )
    with pytest.raises(ValueError, match="at most one of start, tail, since"):
        follow_path("s", 1, None, 2, None, None)
    with pytest.raises(ValueError, match="tail must be"):
        read_range("s", None, 1, -1, None, None)
    with pytest.raises(ValueError, match="count must be"):
        read_range("s", 0, 0, None, None, None)


def test_a_follow_gives_up_fast_until_it_has_been_answered() -> None:
    plan = FollowPlan("s", None, None, None, None, None)
    assert not plan.gives_up(0, 5, 0.1, 30.0) and plan.gives_up(4, 5, 0.1, 30.0)
    plan.ever_opened = True  # then it waits out a restart, up to the deadline
    assert not plan.gives_up(40, 5, 29.0, 30.0) and plan.gives_up(0, 5, 31.0, 30.0)


@pytest.mark.parametrize(
    "one", ["hello", b"hello", bytearray(b"hi"), {"body": b"x"}, NewMessage(b"x")]
)
def test_one_message_where_a_list_is_due_is_a_type_error(one: object) -> None:
    """``enqueue(q, "hello")`` had sent five one-letter messages (a str is a sequence)."""
    with pytest.raises(TypeError, match=r"pass \[message\]"):
        enqueue("q", one)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"pass \[message\]"):
        publish("t", one)  # type: ignore[arg-type]
    assert len(enqueue("q", ["hello"]).calls) == 1
