"""A stream's order key must be a field whose declared type admits integers: a stream
declared otherwise could never take an entry, so the declaration is refused (422)."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from dynaq.errors import InvalidInput
from dynaq.streams import EntryType
from tests.streams.helpers import polymorphic


def _with_ts(spec: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"ts": spec}, "required": ["ts"]}


@pytest.mark.parametrize(
    "spec",
    [{"type": "integer"}, {"type": "number"}, {"type": ["string", "integer"]}, {}, {"minimum": 0}],
)
def test_an_order_key_that_admits_integers_is_accepted(spec: dict[str, Any]) -> None:
    assert EntryType.declare(_with_ts(spec), "ts").order_key == "ts"


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        (_with_ts({"type": "string"}), "schema.properties.ts"),
        (_with_ts({"type": ["string", "null"]}), "schema.properties.ts"),
        (_with_ts({"type": "boolean"}), "schema.properties.ts"),
        (
            {
                "oneOf": [
                    *polymorphic("a")["oneOf"],
                    {
                        **_with_ts({"type": "string"}),
                        "properties": {"type": {"const": "b"}, "ts": {"type": "string"}},
                    },
                ]
            },
            "schema.oneOf[1].properties.ts",
        ),
    ],
)
def test_an_order_key_declared_as_another_type_is_refused(
    schema: dict[str, Any], where: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        EntryType.declare(schema, "ts")
    assert f"must be an integer field: {where} is declared" in str(refused.value)


async def test_the_api_refuses_it_with_422(http: aiohttp.ClientSession) -> None:
    body = {"schema": _with_ts({"type": "string"}), "order_key": "ts"}
    async with http.put("/v2/streams/sk", json=body) as r:
        err = await r.json()
        assert r.status == 422 and err["code"] == "invalid_input", err
        assert "order_key 'ts' must be an integer field" in err["error"]
    async with http.get("/v2/streams/sk/schema") as r:
        assert r.status == 404
    body["schema"] = _with_ts({"type": "integer"})
    async with http.put("/v2/streams/sk", json=body) as r:
        assert r.status == 201
    async with http.post("/v2/streams/sk/entries", json={"entries": [{"ts": 5}]}) as r:
        assert r.status == 200
