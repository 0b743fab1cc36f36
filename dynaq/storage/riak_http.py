"""Riak KV's HTTP API on aiohttp: objects, siblings, 2i pages, bucket properties.

The wire layer of :mod:`dynaq.storage.riak`: it knows URLs, headers and status
codes, nothing about dynaq keys. Every request goes to the next endpoint of
``[riak] http`` in turn (a connection error moves on to the next one, once per
endpoint). Errors are translated here, where they leave the driver:
connection failures, timeouts and Riak's 503 / ``insufficient_vnodes`` 500s
become :class:`StorageUnavailable` (retriable); any other unexpected status
:class:`StorageError` with Riak's own message.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp

from dynaq.errors import InvalidInput, StorageError, StorageUnavailable

_META = "x-riak-meta-"


class Superseded(Exception):
    """A PUT made only if the object was still as read found it changed (412 / 409)."""


_SUPERSEDED = (409, 412)
"""A conditional PUT's refusals: ``If-Match`` / ``If-None-Match`` (412) and
``X-Riak-If-Not-Modified`` (409)."""


@dataclass(frozen=True, slots=True)
class Content:
    """One sibling of a Riak object: its bytes, user metadata and tombstone flag."""

    value: bytes
    meta: Mapping[str, str] = field(default_factory=dict)
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class RiakObject:
    """What a fetch or a ``returnbody`` store saw: the causal context and the siblings.

    ``vclock`` is set for a tombstone too (fetched with ``deletedvclock``), so a
    write after a delete descends from it instead of becoming its sibling.
    ``etag`` is Riak's entity tag of an object that exists (one sibling's vtag,
    or a hash of the clock when there are several); ``None`` when it does not
    (never written, or a tombstone).
    """

    vclock: str | None
    contents: tuple[Content, ...]
    etag: str | None = None

    @property
    def live(self) -> list[Content]:
        """The siblings that are not tombstones."""
        return [c for c in self.contents if not c.deleted]


ABSENT = RiakObject(None, ())


def _endpoint(hostport: str) -> str:
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdecimal():
        raise InvalidInput(f"Riak HTTP endpoint must be host:port, got {hostport!r}")
    return f"http://{host}:{port}"


class RiakHttp:
    """A pooled aiohttp client of one Riak cluster's HTTP listeners, one bucket type."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        bucket_type: str = "default",
        pool_size: int = 64,
        timeout_s: float = 15.0,
    ) -> None:
        if not endpoints:
            raise InvalidInput("riak.http needs at least one host:port")
        self._bases = [_endpoint(e) for e in endpoints]
        self._turn = itertools.cycle(range(len(self._bases)))
        self.bucket_type = bucket_type
        self._type = quote(bucket_type, safe="")
        self._pool_size = pool_size
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._pool_size, keepalive_timeout=30)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)

    @property
    def closed(self) -> bool:
        return self._session is None

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    # plumbing ---------------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        data: bytes | None = None,
        ok: Sequence[int] = (200, 204),
    ) -> tuple[int, Mapping[str, str], bytes]:
        session = self._session
        if session is None:
            raise StorageUnavailable("the Riak store is closed")
        last: Exception | None = None
        for _ in range(len(self._bases)):
            url = self._bases[next(self._turn)] + path
            try:
                async with session.request(
                    method, url, params=params, headers=headers, data=data
                ) as resp:
                    body = await resp.read()
                    status, hdrs = resp.status, resp.headers
            except (aiohttp.ClientConnectionError, OSError) as exc:
                last = exc  # this listener is down: the next one may serve
                continue
            except (TimeoutError, aiohttp.ClientError) as exc:
                raise StorageUnavailable(f"Riak {method} {path}: {exc!r}") from exc
            if status in ok:
                return status, hdrs, body
            text = body[:300].decode("utf-8", "replace")
            if status == 503 or (status == 500 and "insufficient_vnodes" in text):
                raise StorageUnavailable(f"Riak {method} {path}: {status} {text}")
            if status in (408, 500) and "timeout" in text:
                raise StorageUnavailable(f"Riak {method} {path}: {status} {text}")
            raise StorageError(f"Riak {method} {path}: {status} {text}")
        raise StorageUnavailable(f"no Riak HTTP listener answered ({last!r})") from last

    def _key_path(self, bucket: str, key: str) -> str:
        return f"/types/{self._type}/buckets/{bucket}/keys/{key}"

    # objects -----------------------------------------------------------------

    async def fetch(self, bucket: str, key: str) -> RiakObject:
        """The object under ``key`` with every sibling; :data:`ABSENT` if none (a
        tombstone comes back with its vclock and no live content)."""
        status, hdrs, body = await self._request(
            "GET",
            self._key_path(bucket, key),
            params={"deletedvclock": "true"},
            headers={"Accept": "multipart/mixed, */*;q=0.5"},
            ok=(200, 300, 404),
        )
        return _object(status, hdrs, body)

    async def store(
        self,
        bucket: str,
        key: str,
        value: bytes,
        *,
        vclock: str | None = None,
        meta: Mapping[str, str] | None = None,
        indexes: Mapping[str, int] | None = None,
        returnbody: bool = False,
        unchanged_since: RiakObject | None = None,
    ) -> RiakObject | None:
        """PUT ``value``; with ``returnbody`` the object as the write left it (siblings
        appear when a concurrent write did not descend from ``vclock``).

        With ``unchanged_since`` (a fetch of the key), Riak applies the PUT only if
        the object is still as that fetch saw it, checked when Riak processes the
        request, and :class:`Superseded` is raised otherwise: an existing object
        must keep its entity tag and clock (``If-Match``, and
        ``X-Riak-If-Not-Modified`` where Riak 3 knows it), an absent one must
        still be absent (``If-None-Match: *``). Riak's check and write are not
        one atomic step, so two writes checked at the same instant can both
        land (as siblings, for the caller to resolve); what the check rules out
        is a write delayed in flight (its sender timed out) landing after a
        newer one and undoing it.
        """
        headers = {"Content-Type": "application/octet-stream"}
        if returnbody:
            headers["Accept"] = "multipart/mixed, */*;q=0.5"
        if vclock:
            headers["X-Riak-Vclock"] = vclock
        ok: tuple[int, ...] = (200, 204, 300)
        if unchanged_since is not None:
            ok += _SUPERSEDED
            if unchanged_since.etag is None:
                headers["If-None-Match"] = "*"
            else:
                headers["If-Match"] = unchanged_since.etag
                if unchanged_since.vclock:
                    headers["X-Riak-If-Not-Modified"] = unchanged_since.vclock
        for name, v in (meta or {}).items():
            headers[_META + name] = v
        for name, n in (indexes or {}).items():
            headers[f"x-riak-index-{name}"] = str(n)
        status, hdrs, body = await self._request(
            "PUT",
            self._key_path(bucket, key),
            params={"returnbody": "true"} if returnbody else None,
            headers=headers,
            data=value,
            ok=ok,
        )
        if status in _SUPERSEDED:
            raise Superseded(f"{bucket}/{key} changed since it was read")
        return _object(status, hdrs, body) if returnbody else None

    async def remove(self, bucket: str, key: str, vclock: str | None = None) -> bool:
        """DELETE ``key``; whether Riak found it (a fetch then a delete in Riak itself)."""
        headers = {"X-Riak-Vclock": vclock} if vclock else None
        status, _, _ = await self._request(
            "DELETE", self._key_path(bucket, key), headers=headers, ok=(204, 404)
        )
        return status == 204

    async def index_page(
        self,
        bucket: str,
        index: str,
        lo: str | int,
        hi: str | int,
        max_results: int,
        continuation: str | None = None,
    ) -> tuple[list[str], str | None]:
        """One page of a 2i range query (inclusive bounds), sorted by term then key
        (Riak sorts only paginated queries), and the continuation, if any."""
        params = {"max_results": str(max_results)}
        if continuation:
            params["continuation"] = continuation
        path = (
            f"/types/{self._type}/buckets/{bucket}/index/{quote(index, safe='')}"
            f"/{quote(str(lo), safe='')}/{quote(str(hi), safe='')}"
        )
        _, _, body = await self._request("GET", path, params=params)
        doc = json.loads(body)
        return list(doc.get("keys", [])), doc.get("continuation")

    # bucket properties -----------------------------------------------------

    async def props(self, bucket: str) -> dict[str, Any] | None:
        """The bucket's properties; ``None`` when the bucket type does not exist."""
        status, _, body = await self._request(
            "GET", f"/types/{self._type}/buckets/{bucket}/props", ok=(200, 404)
        )
        return json.loads(body)["props"] if status == 200 else None

    async def set_props(self, bucket: str, props: Mapping[str, Any]) -> None:
        await self._request(
            "PUT",
            f"/types/{self._type}/buckets/{bucket}/props",
            headers={"Content-Type": "application/json"},
            data=json.dumps({"props": dict(props)}).encode(),
        )


def _object(status: int, hdrs: Mapping[str, str], body: bytes) -> RiakObject:
    vclock = hdrs.get("X-Riak-Vclock")
    if status == 404:
        return RiakObject(vclock, ())
    etag = hdrs.get("ETag")
    if status in (200, 204) and not hdrs.get("Content-Type", "").startswith("multipart/"):
        return RiakObject(vclock, (_content(hdrs, body),), etag)
    return RiakObject(vclock, tuple(_siblings(hdrs.get("Content-Type", ""), body)), etag)


def _content(hdrs: Mapping[str, str], body: bytes) -> Content:
    meta = {k[len(_META) :].lower(): v for k, v in hdrs.items() if k.lower().startswith(_META)}
    deleted = hdrs.get("X-Riak-Deleted", "").lower() == "true"
    return Content(body, meta, deleted)


def _siblings(content_type: str, body: bytes) -> list[Content]:
    """Split Riak's ``multipart/mixed`` sibling body (CRLF lines, one part per sibling)."""
    _, _, boundary = content_type.partition("boundary=")
    if not boundary:
        raise StorageError(f"Riak answered siblings without a multipart boundary: {content_type}")
    delim = b"\r\n--" + boundary.strip('"').encode()
    out: list[Content] = []
    for part in (b"\r\n" + body).split(delim)[1:]:
        if part.startswith(b"--"):
            break  # the closing delimiter
        head, sep, value = part[2:].partition(b"\r\n\r\n")
        if not sep:
            continue
        hdrs: dict[str, str] = {}
        for line in head.decode("latin-1").split("\r\n"):
            name, colon, v = line.partition(":")
            if colon:
                hdrs[name.strip()] = v.strip()
        out.append(_content(_Caseless(hdrs), value))
    return out


class _Caseless(dict[str, str]):
    """Header lookups that ignore case, as aiohttp's multidict does."""

    def get(self, key: str, default: Any = None) -> Any:
        low = key.lower()
        for k, v in self.items():
            if k.lower() == low:
                return v
        return default


async def gather_limited(calls: Sequence[Any], limit: int) -> list[Any]:
    """Await ``calls`` (coroutines) with at most ``limit`` in flight, results in order."""
    sem = asyncio.Semaphore(limit)

    async def one(c: Any) -> Any:
        async with sem:
            return await c

    return list(await asyncio.gather(*(one(c) for c in calls)))
