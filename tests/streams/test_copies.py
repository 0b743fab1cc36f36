"""A copy's tail cut back to its new authority's size, in process: in the active file,
inside a finalized file (which becomes active again), and across files; what is
left reads back whole and appends go on from there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dynaq.clock import SystemClock
from dynaq.config.sections import StreamsConfig
from dynaq.errors import ReplicaOutOfStep
from dynaq.streams import Start, Stops, StreamService

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


async def _entries(svc: StreamService, name: str) -> list[int]:
    sub = svc.subscribe(name, Start(), Stops(None, None, None), "array")
    out: list[Any] = []
    try:
        async for chunk in svc.chunks(sub, True):
            out.append(chunk.data)
    finally:
        svc.unsubscribe(sub)
    text = b"".join(out).decode()
    return [e["entry"]["n"] for e in json.loads("[" + text.strip().strip(",") + "]")]


@pytest.mark.parametrize("cut", [95, 33, 30, 0])
async def test_a_copy_cut_back_keeps_exactly_what_its_authority_had(
    tmp_path: Path, cut: int
) -> None:
    config = StreamsConfig(segment_max_entries=30)  # finalized files of 30 entries
    svc = StreamService(tmp_path, config, SystemClock())
    await svc.open()
    try:
        await svc.declare("s", SCHEMA, "n")
        for k in range(10):
            await svc.replicate("s", 10 * k, [{"n": 10 * k + j} for j in range(10)])
        assert svc.info("s").size == 100 and svc.info("s").segments == 4
        with pytest.raises(ReplicaOutOfStep):
            await svc.replicate("s", 99, [{"n": 99}])  # a copy never takes a gap or overlap
        assert await svc.truncate("s", cut) == 100 - cut
        assert svc.info("s").size == cut
        assert await _entries(svc, "s") == list(range(cut))
        await svc.replicate("s", cut, [{"n": cut}, {"n": cut + 1}])
    finally:
        await svc.close()
    reopened = StreamService(tmp_path, config, SystemClock())  # and it survives a restart
    await reopened.open()
    try:
        assert await _entries(reopened, "s") == [*range(cut), cut, cut + 1]
        assert reopened.info("s").size == cut + 2
    finally:
        await reopened.close()
