"""Riak clients compared: dynaq's aiohttp HTTP client vs Basho's ``riak`` 2.7.0 (PB and HTTP).

``python -m bench riak_client [--objects N] [--concurrency C] [--riak-pkg DIR]``

One throwaway single-node Riak; each client stores N 256-byte objects with an
``id_int`` index (a message write), reads them back, and pages through a 2i
range (``max_results`` 100), at concurrency C. dynaq's client is asyncio (C
requests in flight on one loop); ``riak`` is blocking, so it runs in C threads
(its connection pool holds one connection per thread). ``riak`` does not import on
Python >= 3.10 without the compatibility shim below (``collections`` ABC aliases,
``namedtuple(verbose=)``); install it apart (``pip install --target DIR riak==2.7.0``,
it pins protobuf 2.5) and pass ``--riak-pkg DIR``. Without it only dynaq's client runs.
Rates are ops/s; ratios are to dynaq's client in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import collections.abc
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import progress
from dynaq.storage.riak_http import RiakHttp, gather_limited
from dynaq.testing.servers.riak import start_riak

BODY = b"x" * 256


def _shim() -> None:
    """Make ``riak`` 2.7.0 importable on Python 3.10+ (what its README's shim does)."""
    for n in ("Iterable", "Mapping", "MutableMapping", "Sequence", "Callable", "MutableSet"):
        setattr(collections, n, getattr(collections.abc, n))
    for n in ("Set", "Sized", "Hashable", "Container"):
        setattr(collections, n, getattr(collections.abc, n))
    original = collections.namedtuple

    def namedtuple(*a: Any, verbose: bool = False, **kw: Any) -> Any:
        return original(*a, **kw)

    collections.namedtuple = namedtuple


async def _dynaq(http: str, n: int, c: int) -> dict[str, float]:
    db = RiakHttp([http], pool_size=c)
    await db.open()
    try:
        t0 = time.perf_counter()
        await gather_limited(
            [db.store("bdq", f"{i:08d}", BODY, indexes={"id_int": i}) for i in range(n)], c
        )
        t1 = time.perf_counter()
        got = await gather_limited([db.fetch("bdq", f"{i:08d}") for i in range(n)], c)
        t2 = time.perf_counter()
        assert all(o.live and o.live[0].value == BODY for o in got)
        seen, cont = 0, None
        while True:
            keys, cont = await db.index_page("bdq", "id_int", 0, n, 100, cont)
            seen += len(keys)
            if not cont:
                break
        t3 = time.perf_counter()
        assert seen == n
    finally:
        await db.close()
    return {"put": n / (t1 - t0), "get": n / (t2 - t1), "2i_keys": n / (t3 - t2)}


def _basho(host: str, port: int, protocol: str, n: int, c: int) -> dict[str, float]:
    import riak  # type: ignore[import-not-found]  # installed apart (--riak-pkg)

    kw = {"pb_port": port} if protocol == "pbc" else {"http_port": port}
    client = riak.RiakClient(protocol=protocol, host=host, **kw)
    bucket = client.bucket(f"b{protocol}")

    def put(i: int) -> None:
        obj = bucket.new(f"{i:08d}", encoded_data=BODY, content_type="application/octet-stream")
        obj.add_index("id_int", i)
        obj.store(return_body=False)

    def get(i: int) -> bytes:
        return bytes(bucket.get(f"{i:08d}").encoded_data)

    with ThreadPoolExecutor(c) as pool:
        t0 = time.perf_counter()
        list(pool.map(put, range(n)))
        t1 = time.perf_counter()
        assert all(v == BODY for v in pool.map(get, range(n)))
        t2 = time.perf_counter()
    seen = 0
    page = bucket.get_index("id_int", 0, n, max_results=100)
    while True:
        seen += len(page.results)
        if not page.has_next_page():
            break
        page = page.next_page()
    t3 = time.perf_counter()
    client.close()
    assert seen == n
    return {"put": n / (t1 - t0), "get": n / (t2 - t1), "2i_keys": n / (t3 - t2)}


def main(argv: list[str]) -> dict[str, Any]:
    p = argparse.ArgumentParser(
        prog="python -m bench riak_client", description=__doc__.split("\n")[0]
    )
    p.add_argument("--objects", type=int, default=3000)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--riak-pkg", default="", help="a --target dir holding riak 2.7.0")
    a = p.parse_args(argv)
    n, c = max(100, a.objects), max(1, a.concurrency)
    tmp = Path(tempfile.mkdtemp(prefix="dynaq-bench-riak-"))
    server = start_riak(tmp / "riak")
    out: dict[str, Any] = {"scenario": "riak-client", "objects": n, "concurrency": c}
    try:
        out["dynaq_http"] = asyncio.run(_dynaq(server.http, n, c))
        if a.riak_pkg:
            sys.path.insert(0, a.riak_pkg)
            _shim()
            out["riak_pb"] = _basho("127.0.0.1", server.pb_port, "pbc", n, c)
            out["riak_http"] = _basho("127.0.0.1", server.http_port, "http", n, c)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    base = out["dynaq_http"]
    for name in ("dynaq_http", "riak_pb", "riak_http"):
        if name in out:
            r = out[name]
            ratios = {k: round(r[k] / base[k], 3) for k in r}
            progress(
                f"{name:<11} put {r['put']:8.0f}/s  get {r['get']:8.0f}/s  "
                f"2i keys {r['2i_keys']:8.0f}/s  (ratio to dynaq_http {ratios})"
            )
            out[name] = {k: round(v) for k, v in r.items()} | {"ratio": ratios}
    return out
