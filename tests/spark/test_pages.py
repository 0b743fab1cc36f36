"""Stored snapshot pages (``encoding=stored``), which the Spark tasks decode themselves:
against a real node process, the same rows as the node's columnar pages."""

from __future__ import annotations

import base64
import json
import struct
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from dynaq.client import Client
from dynaq.spark.pages import _fast_columns, _le_array, page_to_batch, snapshot_page
from dynaq.testing.process import NodeProcess, node_process

pytestmark = pytest.mark.slow

SIZES = [0, 5, 12, 13, 255, 256, 65_535, 65_536, 300]
"""Body lengths across msgpack's bin8/16/32 headers and Arrow's 12-byte inline views."""


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    p = node_process(tmp_path_factory.mktemp("pages-node"), "pages-1").start()
    try:
        yield p
    finally:
        p.terminate()


def _call(url: str, method: str, body: Any = None) -> None:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status < 300


def _queue(node: NodeProcess, name: str, **settings: Any) -> None:
    _call(f"{node.url}/v1/queues/{name}", "PUT")
    if settings:
        _call(f"{node.url}/v1/queues/{name}", "PATCH", settings)


def _mixed(n: int) -> list[dict[str, Any]]:
    """Bodies of every header width, some with attributes, some in a group (a stored
    value of five members)."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        m: dict[str, Any] = {"body": bytes([65 + i % 26]) * SIZES[i % len(SIZES)]}
        if i % 4 == 1:
            m["attributes"] = {"i": str(i)}
        if i % 5 == 2:
            m["group"] = f"g{i % 3}"
        out.append(m)
    return out


def _pages(node: NodeProcess, queue: str, stored: bool, limit: int) -> list[dict[str, Any]]:
    pages: list[dict[str, Any]] = []
    with Client(node.url) as c:
        for p in c.partitions(queue):
            start = p.from_id
            while True:
                if stored:
                    page = snapshot_page(c, queue, start, p.to_id, limit, p.http)
                else:
                    page = c.snapshot_page(queue, start, p.to_id, limit, addr=p.http)
                pages.append(page)
                if page["next_from_id"] is None:
                    break
                start = page["next_from_id"]
    return pages


def _fast(page: dict[str, Any]) -> bool:
    n = page["count"]
    offsets = _le_array(page["value_offsets"], n + 1, pa.int32(), "i")
    return _fast_columns(n, offsets, page["values"]) is not None


@pytest.mark.parametrize("compressed", [False, True])
def test_stored_pages_decode_to_the_columnar_pages(node: NodeProcess, compressed: bool) -> None:
    name = f"mixed-{compressed}"
    _queue(node, name, min_partitions=2, compressed_messages=compressed)
    with Client(node.url) as c:
        c.enqueue(name, _mixed(90))
    columns = _pages(node, name, stored=False, limit=7)
    stored = _pages(node, name, stored=True, limit=7)
    assert [p["count"] for p in stored] == [p["count"] for p in columns]
    assert [p["next_from_id"] for p in stored] == [p["next_from_id"] for p in columns]
    assert sum(p["count"] for p in stored) == 90
    for col, sto in zip(columns, stored, strict=True):
        assert "values" in sto and "bodies" not in sto
        assert page_to_batch(sto, 1, "pages-1").equals(page_to_batch(col, 1, "pages-1"))
        assert not _fast(sto)  # attributes, short bodies or zlib: decoded value by value


def test_plain_pages_take_the_vectorized_path(node: NodeProcess) -> None:
    _queue(node, "plain", min_partitions=1)
    with Client(node.url) as c:
        c.enqueue("plain", [{"body": f"{i:08d}".encode() * (2 + i % 40)} for i in range(500)])
        c.enqueue("plain", [{"body": b"g" * 70_000, "group": "g"}])  # bin32, five members
    columns = _pages(node, "plain", stored=False, limit=200)
    stored = _pages(node, "plain", stored=True, limit=200)
    # One enqueue lands in the lanes of the worker that took it, the group's message
    # in its hash's lane: on a node of several workers another partition may hold it,
    # and the others are empty pages.
    assert sorted(n for p in stored if (n := p["count"])) in ([101, 200, 200], [1, 100, 200, 200])
    for col, sto in zip(columns, stored, strict=True):
        assert _fast(sto) or not sto["count"]  # an empty page has no columns to take
        assert page_to_batch(sto, 0, "n").equals(page_to_batch(col, 0, "n"))
    with Client(node.url) as c:  # one message with attributes: its page decodes one by one
        (attributed,) = c.enqueue("plain", [{"body": b"a" * 100, "attributes": {"k": "v"}}])
    for page in _pages(node, "plain", stored=True, limit=200):
        batch = page_to_batch(page, 0, "n").to_pydict()
        if attributed in batch["id"]:
            assert not _fast(page)
            assert batch["attributes"][batch["id"].index(attributed)] == [("k", "v")]
            assert batch["body"][batch["id"].index(attributed)] == b"a" * 100


def test_stored_encoding_in_json_and_a_bad_encoding(node: NodeProcess) -> None:
    _queue(node, "json")
    with Client(node.url) as c:
        ids = c.enqueue("json", [{"body": b"x" * 40} for _ in range(3)])
    with urllib.request.urlopen(f"{node.url}/v2/queues/json/snapshot?encoding=stored") as r:
        page = json.load(r)
    assert page["count"] == 3 and page["next_from_id"] is None
    assert list(struct.unpack("<3q", base64.b64decode(page["ids"]))) == sorted(ids)
    offsets = struct.unpack("<4i", base64.b64decode(page["value_offsets"]))
    assert offsets[-1] == len(base64.b64decode(page["values"]))
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{node.url}/v2/queues/json/snapshot?encoding=rows")
    assert err.value.code == 422
    err.value.close()


def test_a_malformed_stored_value_is_an_error_naming_its_message() -> None:
    page = {
        "count": 1,
        "ids": struct.pack("<q", 42),
        "value_offsets": struct.pack("<2i", 0, 3),
        "values": b"\x94\x00\xc4",  # cut inside its body's header
        "next_from_id": None,
    }
    with pytest.raises(ValueError, match="message 42 is corrupt"):
        page_to_batch(page, 0, "n")


def test_spark_reads_stored_pages_exactly_once(spark: Any, node: NodeProcess) -> None:
    _queue(node, "wide", min_partitions=2)
    with Client(node.url) as c:
        ids = c.enqueue("wide", [{"body": f"{i:06d}".encode() * 50} for i in range(3000)])
        ids += c.enqueue("wide", [{"body": b"tiny", "attributes": {"a": "b"}}])
    df = (
        spark.read.format("dynaq")
        .option("endpoint", node.url)
        .option("queue", "wide")
        .option("pageSize", "700")
        .load()
    )
    rows = df.select("id", "body", "attributes").collect()
    assert len(rows) == 3001 and sorted(r.id for r in rows) == sorted(ids)
    bodies = {r.id: bytes(r.body) for r in rows}
    assert [bodies[i] for i in ids[:3000]] == [f"{i:06d}".encode() * 50 for i in range(3000)]
    assert bodies[ids[-1]] == b"tiny"
    assert {r.id: r.attributes for r in rows}[ids[-1]] == {"a": "b"}


def test_a_task_reads_each_page_once_while_the_next_is_fetched(node: NodeProcess) -> None:
    """The reader asks for the next page while Spark consumes this one: every row
    comes once and in id order, and a task stopped early (``limit``) ends at once
    without leaving its fetch behind."""
    from dynaq.spark.source import DynaqReader

    _queue(node, "ahead", min_partitions=1, max_partitions=1)
    with Client(node.url) as c:
        ids = c.enqueue("ahead", [{"body": f"m{i:05d}".encode() * 4} for i in range(2500)])
    reader = DynaqReader({"endpoint": node.url, "queue": "ahead", "pagesize": "300"})
    # One partition per worker (a node of several takes a large enqueue's requests
    # on several): each is read page by page, the next fetched meanwhile.
    seen: list[int] = []
    for part in reader.partitions():
        held = sorted(i for i in ids if part.from_id <= i <= part.to_id)
        batches = list(reader.read(part))
        full, rest = divmod(len(held), 300)
        assert [len(b) for b in batches] == [300] * full + ([rest] if rest else [])
        assert [i for b in batches for i in b.column(0).to_pylist()] == held
        seen += held
    assert sorted(seen) == sorted(ids)
    part = max(reader.partitions(), key=lambda p: sum(p.from_id <= i <= p.to_id for i in ids))
    held = sorted(i for i in ids if part.from_id <= i <= part.to_id)
    assert len(held) > 300
    early = reader.read(part)
    first = next(early)
    early.close()  # as Spark does once a limit is met: the pending fetch is awaited
    assert first.column(0).to_pylist() == held[:300]
