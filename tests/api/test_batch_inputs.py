"""Bad batch inputs: the exact status, code and message each one answers with.

The API checks types and the service checks ranges; this pins the answers so
neither side's checks can move or vanish without a test noticing.
"""

from __future__ import annotations

from typing import Any

import aiohttp

EXACT = "/api/v1/batch/exact"
EST = "/api/v1/batch/estimated"

_ITEMS = "items must be a positive integer (how many items to add)"
_ITEMS_RANGE = "items must be a positive integer"
_BY_RANGE = "by must be a positive integer"
_DECR_BY = "acks[0].by must be a positive integer"

OPEN_CASES: list[tuple[Any, int, str | None]] = [
    (5, 422, "userKey must be a string"),
    (True, 422, "userKey must be a string"),
    ([], 422, "userKey must be a string"),
    (1.5, 422, "userKey must be a string"),
    ("x" * 1025, 422, "userKey must be a string of at most 1024 characters"),
    ("x" * 1024, 200, None),
    ("", 200, None),
    (None, 200, None),
]

ITEMS_CASES: list[tuple[Any, int, str | None]] = [
    (0, 422, _ITEMS_RANGE),
    (-5, 422, _ITEMS_RANGE),
    ("7", 422, _ITEMS),
    (True, 422, _ITEMS),
    (False, 422, _ITEMS),
    (1.5, 422, _ITEMS),
    (None, 422, _ITEMS),
    (1_000_001, 422, "at most 1000000 items per request, got 1000001"),
    (3, 200, None),
]

INCR_CASES: list[tuple[str, int, str | None]] = [
    ("0", 422, _BY_RANGE),
    ("-1", 422, "by='-1' must be a positive integer"),
    ("1.5", 422, "by='1.5' must be a positive integer"),
    ("0000000000001", 422, "by='0000000000001' must be a positive integer"),
    ("1000001", 422, "by must be at most 1000000"),
    ("000000000001", 200, None),
]

DECR_CASES: list[tuple[Any, int, str | None]] = [
    (0, 422, _BY_RANGE),
    (-1, 422, _BY_RANGE),
    (True, 422, _DECR_BY),
    ("1", 422, _DECR_BY),
    (1.5, 422, _DECR_BY),
    (None, 422, _DECR_BY),
    (1_000_001, 422, "by must be at most 1000000"),
    (1, 200, None),
]


async def _check(r: aiohttp.ClientResponse, status: int, error: str | None) -> None:
    got = await r.json()
    assert r.status == status, got
    if error is not None:
        assert got == {"error": error, "code": "invalid_input"}


async def test_bad_user_keys(http: aiohttp.ClientSession) -> None:
    for base in (EXACT, EST):
        for user_key, status, error in OPEN_CASES:
            await _check(await http.post(base, json={"userKey": user_key}), status, error)


async def test_bad_item_counts(http: aiohttp.ClientSession) -> None:
    b = (await (await http.post(EXACT, json={})).json())["batchId"]
    for items, status, error in ITEMS_CASES:
        r = await http.post(f"{EXACT}/items", json={"batchId": b, "items": items})
        await _check(r, status, error)


async def test_bad_estimated_steps(http: aiohttp.ClientSession) -> None:
    b = (await (await http.post(EST, json={})).json())["batchId"]
    for by, status, error in INCR_CASES:
        await _check(await http.post(f"{EST}/{b}/incr?by={by}"), status, error)
    for by_value, status, error in DECR_CASES:
        r = await http.post(f"{EST}/decr", json={"acks": [{"batchId": b, "by": by_value}]})
        await _check(r, status, error)


async def test_a_malformed_batch_id_in_a_path_is_a_422_naming_it(
    http: aiohttp.ClientSession,
) -> None:
    malformed = "malformed batch id {!r}: expected a decimal integer in [0, 2^63)"
    for bad in ("zz", "-1", "9223372036854775808", "1.5"):
        for method, path in (
            ("GET", f"{EXACT}/{bad}"),
            ("DELETE", f"{EST}/{bad}"),
            ("POST", f"{EXACT}/close/{bad}"),
            ("POST", f"{EST}/{bad}/close"),
            ("POST", f"{EST}/{bad}/incr?by=1"),
        ):
            await _check(await http.request(method, path), 422, malformed.format(bad))
    # The fixed paths next to the ids still answer as themselves.
    for kind in ("open", "closed"):
        async with http.delete(f"{EXACT}/{kind}?since=1") as r:
            assert r.status < 400, await r.text()
