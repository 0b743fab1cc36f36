"""Deleting a stream while appends are in flight, on a real node process: every append
is acknowledged or told the stream is being deleted / is gone, none fails with a 5xx
or an error in the log, and what another stream acknowledged meanwhile is all there."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from dynaq.testing.process import NodeProcess, node_process
from tests.streams.helpers import read

ROUNDS = 15
APPENDERS = 5
APPENDS = 20
ALLOWED = {(200, None), (404, "stream_not_found"), (503, "stream_deleting")}
"""Acknowledged, gone, or being deleted (the answer ``DELETE`` documents meanwhile)."""


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = node_process(tmp_path_factory.mktemp("delete-race")).start()
    try:
        yield proc
    finally:
        proc.terminate()


def _errors(log: Path) -> list[str]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("level") in ("error", "critical"):
            out.append(line)
    return out


async def test_appends_racing_a_delete_are_answered_cleanly(node: NodeProcess) -> None:
    url = node.url
    schema = {"schema": {"type": "object"}}
    answers: Counter[tuple[int, str | None]] = Counter()
    kept: list[int] = []
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as http:

        async def call(method: str, path: str, body: object = None) -> tuple[int, object]:
            async with http.request(method, f"{url}{path}", json=body) as r:
                return r.status, await r.json(content_type=None) if r.content_length else None

        async def appends(stream: str, n: int) -> list[tuple[int, object]]:
            out = []
            for i in range(n):
                out.append(
                    await call("POST", f"/v2/streams/{stream}/entries", {"entries": [{"b": i}]})
                )
            return out

        assert (await call("PUT", "/v2/streams/survivor", schema))[0] == 201
        async with asyncio.timeout(120):
            for round_ in range(ROUNDS):
                assert (await call("PUT", "/v2/streams/doomed", schema))[0] == 201
                racing = [asyncio.create_task(appends("doomed", APPENDS)) for _ in range(APPENDERS)]
                beside = asyncio.create_task(appends("survivor", APPENDS))
                await asyncio.sleep(0.002 * (round_ % 10))
                assert (await call("DELETE", "/v2/streams/doomed"))[0] == 204
                for status, body in [x for t in racing for x in await t]:
                    code = body.get("code") if isinstance(body, dict) else None
                    answers[(status, None if status == 200 else code)] += 1
                for status, body in await beside:
                    assert status == 200, body
                    assert isinstance(body, dict)
                    kept.append(int(body["first_index"]))
        status, got, _ = await read(http, url, "survivor", i=0, nowait="true", format="array")
    assert set(answers) <= ALLOWED, answers
    assert sum(answers.values()) == ROUNDS * APPENDERS * APPENDS
    # Nothing acknowledged on the stream left standing is lost.
    assert status == 200
    assert sorted(kept) == list(range(ROUNDS * APPENDS))
    assert [e["index"] for e in json.loads(got)] == sorted(kept)
    assert await asyncio.to_thread(_errors, node.log_path) == []
