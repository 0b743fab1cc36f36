"""The memory of FIFO receive attempts: 5 minutes, bounded in entries and bytes."""

from __future__ import annotations

from dynaq.api.aws.sqs_attempts import ATTEMPT_WINDOW_S, Attempt, ReceiveAttempts
from dynaq.core.messages import Message


def _messages(n: int, size: int) -> list[Message]:
    return [Message(id=i, body=b"x" * size, enqueued_ms=0) for i in range(n)]


def test_an_attempt_is_remembered_for_its_window_only() -> None:
    attempts = ReceiveAttempts()
    attempts.put((1, "", "a"), Attempt(0.0, _messages(2, 10), None))
    assert attempts.get((1, "", "a"), ATTEMPT_WINDOW_S - 1) is not None
    assert attempts.get((1, "", "a"), ATTEMPT_WINDOW_S) is None
    assert len(attempts) == 0


def test_the_oldest_attempts_go_first_past_the_entry_and_byte_bounds() -> None:
    attempts = ReceiveAttempts(max_entries=3, max_bytes=9_300)
    for i in range(5):
        attempts.put((1, "", f"a{i}"), Attempt(float(i), _messages(1, 10), None))
    assert [attempts.get((1, "", f"a{i}"), 5.0) is not None for i in range(5)] == [
        False, False, True, True, True,
    ]  # fmt: skip
    attempts.put((1, "", "big"), Attempt(6.0, _messages(3, 3_000), 30.0))
    # 9 KB of bodies: the two oldest no longer fit beside it.
    assert attempts.get((1, "", "big"), 6.0) is not None
    assert [attempts.get((1, "", f"a{i}"), 6.0) is not None for i in (2, 3, 4)] == [
        False, False, True,
    ]  # fmt: skip
