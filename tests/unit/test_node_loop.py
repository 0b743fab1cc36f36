"""How ``dynaq server`` runs its event loop (``dynaq.cli.node.run_loop``)."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Iterator

import pytest

from dynaq.cli.node import run_loop


@pytest.fixture
def switch_interval() -> Iterator[None]:
    before = sys.getswitchinterval(), gc.get_threshold()
    yield
    gc.unfreeze()
    sys.setswitchinterval(before[0])
    gc.set_threshold(*before[1])


@pytest.mark.parametrize(("event_loop", "module"), [("uvloop", "uvloop"), ("asyncio", "asyncio")])
def test_the_node_runs_on_the_loop_it_is_told_with_its_gil_and_gc_settings(
    switch_interval: None, event_loop: str, module: str
) -> None:
    seen: dict[str, object] = {}

    async def main() -> None:
        seen["loop"] = type(asyncio.get_running_loop()).__module__.partition(".")[0]
        seen["interval"] = sys.getswitchinterval()
        seen["gc"] = gc.get_threshold()
        seen["frozen"] = gc.get_freeze_count()

    run_loop(main(), event_loop)
    assert seen["loop"] == module
    # The LMDB writer thread takes the GIL back after every LMDB call; behind a
    # busy loop the default 5 ms interval made each take that slow.
    assert isinstance(seen["interval"], float) and seen["interval"] <= 0.001
    # Young collections every 20,000 allocations, not 700: a tenth of the CPU.
    assert isinstance(seen["gc"], tuple) and seen["gc"][0] >= 10_000
    assert isinstance(seen["frozen"], int) and seen["frozen"] > 0  # the imports' objects
