"""The fanout checker judges what it is given: hand-made histories with known faults."""

from __future__ import annotations

from collections import Counter

from dynaq.testing.fanout_history import FanoutHistory, Publish, check_fanout

QUEUES = ("a", "b", "c")


def _history(publishes: list[Publish], delivered: dict[str, list[str]]) -> FanoutHistory:
    fh = FanoutHistory(QUEUES, publishes=publishes)
    fh.delivered = {q: Counter(delivered.get(q, [])) for q in QUEUES}
    return fh


def test_a_whole_unfiltered_history_is_ok() -> None:
    p = Publish(["t1", "t2"], "ok", ids={q: ["1", "2"] for q in QUEUES})
    v = check_fanout(_history([p], {q: ["t1", "t2"] for q in QUEUES}))
    assert v.ok and v.as_dict()["acked"] == 2


def test_an_acked_copy_missing_from_one_queue_is_lost() -> None:
    p = Publish(["t1"], "ok", ids={q: ["1"] for q in QUEUES})
    v = check_fanout(_history([p], {"a": ["t1"], "b": ["t1"]}))
    assert (v.lost, v.ok) == (1, False)
    assert v.examples["lost"] == ["t1@c"]


def test_an_unanswered_publish_seen_in_some_queues_only_is_partial() -> None:
    p = Publish(["t1"], "unknown")
    v = check_fanout(_history([p], {"a": ["t1"]}))
    assert (v.partial, v.lost) == (1, 0)


def test_filtered_routes_count_only_the_queues_that_want_the_message() -> None:
    p = Publish(["t1", "t2"], "ok", ids={"a": ["1", "2"], "b": ["3"]})
    p.routes = {"t1": ["a", "b"], "t2": ["a"]}
    v = check_fanout(_history([p], {"a": ["t1", "t2"], "b": ["t1"]}))
    assert v.ok, v.as_dict()


def test_a_copy_in_a_queue_whose_filter_refuses_it_is_misrouted() -> None:
    p = Publish(["t1"], "ok", ids={"a": ["1"], "c": ["2"]})
    p.routes = {"t1": ["a"]}
    v = check_fanout(_history([p], {"a": ["t1"], "c": ["t1"]}))
    assert (v.misrouted, v.ok) == (1, False)
    assert v.examples["misrouted"] == ["t1@c"]
    assert v.wrong_answers == 1  # the answer named c too


def test_an_unanswered_filtered_publish_may_be_whole_over_its_own_queues() -> None:
    p = Publish(["t1"], "unknown")
    p.routes = {"t1": ["b"]}
    assert check_fanout(
        _history(
            [p, Publish(["t0"], "ok", ids={"a": ["9"]}, routes={"t0": ["a"]})],
            {"a": ["t0"], "b": ["t1"]},
        )
    ).ok


def test_an_unfiltered_answer_must_give_every_queue_an_id_per_message() -> None:
    short = Publish(["t1", "t2"], "ok", ids={"a": ["1", "2"], "b": ["3", "4"], "c": ["5"]})
    v = check_fanout(_history([short], {q: ["t1", "t2"] for q in QUEUES}))
    assert (v.wrong_answers, v.ok) == (1, False)
