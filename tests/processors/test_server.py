"""The node-side pieces processors need: conditional appends (``expect_index``, 409
``index_taken``), hidden ``_cues.*`` streams, and their documentation."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from dynaq.client import AsyncClient
from dynaq.errors import IndexTaken, InvalidInput, PublisherFenced
from dynaq.testing.process import NodeProcess


@pytest.fixture
async def client(node: NodeProcess) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(node.url) as c:
        yield c


async def test_conditional_append_lands_only_at_its_index(
    client: AsyncClient, node: NodeProcess
) -> None:
    await client.declare_stream("cond", {"type": "object"})
    assert (await client.append("cond", [{"i": 0}, {"i": 1}])).first_index == 0
    got = await client.append("cond", [{"i": 2}, {"i": 3}], expect_index=2)
    assert (got.first_index, got.count) == (2, 2)
    for stale in (2, 3, 5):  # taken, taken, not next: nothing is written
        with pytest.raises(IndexTaken) as err:
            await client.append("cond", [{"i": "late"}], expect_index=stale)
        assert err.value.code == "index_taken" and err.value.status == 409
    assert await client.stream_size("cond") == 4
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{node.url}/v2/streams/cond/entries?expect_index=1", json={"entries": [{"i": 9}]}
        ) as r:
            assert r.status == 409
            body = await r.json()
            assert body["code"] == "index_taken" and "holds 4 entries" in body["error"]
        for bad in ("-1", "x", "1.5"):
            async with http.post(
                f"{node.url}/v2/streams/cond/entries?expect_index={bad}",
                json={"entries": [{"i": 9}]},
            ) as r:
                assert r.status == 422, bad
        async with http.post(
            f"{node.url}/v2/streams/cond/entries?expect=4", json={"entries": [{"i": 9}]}
        ) as r:
            assert r.status == 422  # an unknown parameter is refused, not ignored
    assert await client.stream_size("cond") == 4
    with pytest.raises(ValueError):
        await client.append("cond", [{"i": 9}], expect_index=-1)


async def test_conditional_append_still_needs_the_lease(client: AsyncClient) -> None:
    await client.declare_stream("cond-lease", {"type": "object"})
    lease = await client.acquire_publisher("cond-lease", ttl_s=30)
    with pytest.raises(PublisherFenced):
        await client.append("cond-lease", [{"i": 0}], expect_index=0)
    got = await client.append("cond-lease", [{"i": 0}], token=lease.token, expect_index=0)
    assert got.first_index == 0
    with pytest.raises(IndexTaken):
        await client.append("cond-lease", [{"i": 1}], token=lease.token, expect_index=0)
    await client.release_publisher("cond-lease", lease.token)


async def test_backing_streams_are_hidden_unless_asked(
    client: AsyncClient, node: NodeProcess
) -> None:
    await client.declare_stream("_cues.g.p", {"type": "object"})
    await client.declare_stream("shown", {"type": "object"})
    names = [s.name for s in await client.list_streams()]
    assert "shown" in names and not [n for n in names if n.startswith("_cues.")]
    hidden = [s.name for s in await client.list_streams(hidden=True)]
    assert "_cues.g.p" in hidden and "shown" in hidden
    assert (await client.describe_stream("_cues.g.p")).name == "_cues.g.p"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{node.url}/v2/streams?hidden=false") as r:
            assert "_cues.g.p" not in {s["name"] for s in (await r.json())["streams"]}
        async with http.get(f"{node.url}/v2/streams?hidden=maybe") as r:
            assert r.status == 422
        async with http.get(f"{node.url}/v2/streams?hiden=true") as r:
            assert r.status == 422


async def test_openapi_documents_expect_index_and_hidden(node: NodeProcess) -> None:
    async with aiohttp.ClientSession() as http, http.get(f"{node.url}/openapi.json") as r:
        spec = await r.json()
    append = spec["paths"]["/v2/streams/{name}/entries"]["post"]
    (param,) = [p for p in append["parameters"] if p["name"] == "expect_index"]
    assert param["in"] == "query" and "index_taken" in param["description"]
    assert "409" in append["responses"]
    listing = spec["paths"]["/v2/streams"]["get"]
    assert [p["name"] for p in listing["parameters"]] == ["hidden"]


def test_index_taken_is_a_conflict() -> None:
    from dynaq.errors import Conflict

    assert issubclass(IndexTaken, Conflict) and IndexTaken.status == 409
    assert not issubclass(IndexTaken, InvalidInput)
