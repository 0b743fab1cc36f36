"""The crash point: parsed strictly, inert unless its step is reached.

That it really kills the process at the step is what tests/faults/test_transactions.py
and tests/faults/test_tasks.py rely on (each crash there is checked to have happened)."""

from __future__ import annotations

import pytest

from dynaq.errors import InvalidInput
from dynaq.services.queues.crash_point import CRASH_STEPS, CrashPoint


@pytest.mark.parametrize("spec", ["nowhere", "held:x", "held:", "held:0", ":3", "written:1:2"])
def test_a_bad_spec_is_refused_at_start(spec: str) -> None:
    with pytest.raises(InvalidInput, match="crash point"):
        CrashPoint(spec)


@pytest.mark.parametrize("spec", [None, ""])
def test_unset_it_does_nothing(spec: str | None) -> None:
    point = CrashPoint(spec)
    assert point.step is None
    for step in CRASH_STEPS:
        point.reached(step)  # no kill: the test goes on


def test_other_steps_and_earlier_passes_do_not_kill() -> None:
    point = CrashPoint("written:3")
    assert point.step == "written"
    point.reached("held")
    point.reached("prepared")
    point.reached("written")
    point.reached("written")  # the third time would kill
