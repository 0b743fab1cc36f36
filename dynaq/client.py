"""A small synchronous dynaq client (stdlib HTTP + msgpack) for batch jobs and Spark workers.

It imports nothing of the server (no aiohttp), so it loads fast inside a
Spark executor. One :class:`Client` holds one keep-alive connection per node
address; it is not thread-safe and not picklable on purpose: build it where
it is used (in a task's ``read()``, not on the driver's reader object).

``token`` is sent as ``Authorization: Bearer <token>`` on every request (and
never appears in an error message). An ``https://`` endpoint is verified
against ``ca_file`` (or the system's CAs); nodes named by address (``addr=``,
from :meth:`Client.ring`) are reached with the endpoint's scheme: a cluster
serves either HTTP or HTTPS throughout.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

MSGPACK = "application/msgpack"
MAX_BATCH = 1000
"""Messages per enqueue/publish request (the server's default ``http.max_batch``)."""


_IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


class DynaqClientError(Exception):
    """The server answered with an error (``status``, ``code``) or could not be reached."""

    def __init__(self, message: str, status: int = 0, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True)
class RingMember:
    """A live node and its slice of the id space (inclusive)."""

    name: str
    http: str
    from_id: int
    to_id: int


@dataclass(frozen=True)
class PartitionRange:
    """One partition a node serves a queue from (ids inclusive)."""

    node: str
    http: str
    index: int
    from_id: int
    to_id: int


@dataclass(frozen=True)
class ReceivedMessage:
    """A message received under a visibility timeout."""

    id: int
    body: bytes
    enqueued_at_ms: int
    receive_count: int
    attributes: dict[str, str] | None


def _split(endpoint: str) -> tuple[str, str]:
    """``http[s]://host:port`` or ``host:port`` (http) → ``(scheme, "host:port")``."""
    if "://" in endpoint:
        parsed = urllib.parse.urlsplit(endpoint)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"endpoint must be http(s)://host:port, got {endpoint!r}")
        return parsed.scheme, parsed.netloc
    return "http", endpoint


class Client:
    """Talks to one dynaq node (``endpoint``) and, for per-node calls, to any other by address."""

    def __init__(
        self,
        endpoint: str,
        timeout_s: float = 60.0,
        *,
        token: str | None = None,
        ca_file: str | None = None,
    ) -> None:
        self.scheme, self.addr = _split(endpoint)
        self.timeout_s = timeout_s
        self._token = token
        self._tls: ssl.SSLContext | None = None
        if self.scheme == "https":
            self._tls = ssl.create_default_context(cafile=ca_file)
        elif ca_file is not None:
            raise ValueError("ca_file is for https:// endpoints")
        self._conns: dict[str, http.client.HTTPConnection] = {}

    def __repr__(self) -> str:
        return f"Client({self.scheme}://{self.addr})"  # never the token

    def _connect(self, addr: str) -> http.client.HTTPConnection:
        host, _, port = addr.rpartition(":")
        if self._tls is not None:
            return http.client.HTTPSConnection(
                host, int(port), timeout=self.timeout_s, context=self._tls
            )
        return http.client.HTTPConnection(host, int(port), timeout=self.timeout_s)

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # plumbing ----------------------------------------------------------------

    def _request(self, method: str, path: str, body: Any = None, addr: str | None = None) -> Any:
        addr = addr or self.addr
        headers = {"Accept": MSGPACK}
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        payload = None
        if body is not None:
            payload = msgpack.packb(body)
            headers["Content-Type"] = MSGPACK
        for attempt in (1, 2):  # one retry on a connection the server closed while idle
            conn = self._conns.get(addr)
            reused = conn is not None
            if conn is None:
                conn = self._conns[addr] = self._connect(addr)
            sent = False
            try:
                conn.request(method, path, body=payload, headers=headers)
                sent = True
                resp = conn.getresponse()
                data = resp.read()
                break
            except (ConnectionError, http.client.HTTPException, OSError) as exc:
                conn.close()
                self._conns.pop(addr, None)
                # A POST that reached the server may have been processed (an
                # enqueue stored): retry it only if it never left, on a kept-alive
                # connection the server had closed. Other methods are idempotent.
                safe = method in _IDEMPOTENT or (reused and not sent)
                if attempt == 2 or not safe:
                    raise DynaqClientError(f"{method} {addr}{path}: {exc}") from exc
        ctype = resp.getheader("Content-Type", "")
        decoded: Any = (
            msgpack.unpackb(data, strict_map_key=False)
            if ctype.startswith(MSGPACK)
            else json.loads(data or b"null")
        )
        if resp.status >= 400:
            err = decoded if isinstance(decoded, dict) else {}
            raise DynaqClientError(
                f"{method} {addr}{path}: {resp.status} {err.get('error', decoded)}",
                resp.status,
                str(err.get("code", "")),
            )
        return decoded

    @staticmethod
    def _q(name: str) -> str:
        return urllib.parse.quote(name, safe="")

    # cluster -----------------------------------------------------------------

    def ring(self) -> list[RingMember]:
        """The live members and their slices, as this node sees them."""
        got = self._request("GET", "/v2/status/ring")
        return [
            RingMember(m["name"], m["http"], int(m["from_id"]), int(m["to_id"]))
            for m in got["members"]
        ]

    def partitions(self, queue: str, addr: str | None = None) -> list[PartitionRange]:
        """The partitions node ``addr`` (default: the endpoint) serves ``queue`` from."""
        got = self._request("GET", f"/v2/queues/{self._q(queue)}/partitions", addr=addr)
        return [
            PartitionRange(got["node"], got["http"], p["index"], int(p["from_id"]), int(p["to_id"]))
            for p in got["partitions"]
        ]

    def snapshot_page(
        self, queue: str, from_id: int, to_id: int, limit: int = 5000, addr: str | None = None
    ) -> dict[str, Any]:
        """One columnar snapshot page (see :mod:`dynaq.services.snapshots`); never locks."""
        query = urllib.parse.urlencode({"from_id": from_id, "to_id": to_id, "limit": limit})
        page: dict[str, Any] = self._request(
            "GET", f"/v2/queues/{self._q(queue)}/snapshot?{query}", addr=addr
        )
        return page

    # streams -----------------------------------------------------------------

    def stream_size(self, stream: str) -> int:
        """How many entries the stream holds (its next index)."""
        out: dict[str, Any] = self._request("GET", f"/v2/streams/{self._q(stream)}?sizeonly=true")
        return int(out["size"])

    def read_stream(self, stream: str, start: int, count: int) -> list[dict[str, Any]]:
        """Up to ``count`` entries from index ``start``, as ``{"index", "order", "entry"}``;
        answers at once with what is there (``nowait``), never waits for more."""
        query = urllib.parse.urlencode(
            {"i": start, "n": count, "nowait": "true", "format": "array"}
        )
        out = self._request("GET", f"/v2/streams/{self._q(stream)}?{query}")
        return list(out or [])

    # messages ----------------------------------------------------------------

    @staticmethod
    def _wire(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for m in messages:
            item: dict[str, Any] = {"body": m["body"]}
            if m.get("attributes"):
                item["attributes"] = m["attributes"]
            for k in ("group", "dedup_id"):
                if m.get(k) is not None:
                    item[k] = m[k]
            out.append(item)
        return out

    def enqueue(self, queue: str, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """Enqueue ``messages`` (dicts with ``body`` bytes and optional ``attributes``,
        ``group``, ``dedup_id``) in requests of :data:`MAX_BATCH`; return their ids."""
        ids: list[int] = []
        for i in range(0, len(messages), MAX_BATCH):
            got = self._request(
                "POST",
                f"/v2/queues/{self._q(queue)}/messages",
                {"messages": self._wire(messages[i : i + MAX_BATCH])},
            )
            ids.extend(got["ids"])
        return ids

    def publish(self, topic: str, messages: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
        """Publish ``messages`` to every queue subscribed to ``topic``; return ids per queue."""
        out: dict[str, list[int]] = {}
        for i in range(0, len(messages), MAX_BATCH):
            got = self._request(
                "POST",
                f"/v2/topics/{self._q(topic)}/messages",
                {"messages": self._wire(messages[i : i + MAX_BATCH])},
            )
            for q, ids in got["ids"].items():
                out.setdefault(q, []).extend(ids)
        return out

    def receive(
        self,
        queue: str,
        max_messages: int = 100,
        visibility_timeout_s: float | None = None,
        addr: str | None = None,
    ) -> list[ReceivedMessage]:
        """Receive from node ``addr``'s slice (default: the endpoint) under a visibility timeout."""
        body: dict[str, Any] = {"max_messages": max_messages}
        if visibility_timeout_s is not None:
            body["visibility_timeout_s"] = visibility_timeout_s
        got = self._request("POST", f"/v2/queues/{self._q(queue)}/messages/receive", body, addr)
        return [
            ReceivedMessage(
                m["id"], m["body"], m["enqueued_at_ms"], m["receive_count"], m.get("attributes")
            )
            for m in got["messages"]
        ]

    def release(self, queue: str, ids: Sequence[int], addr: str | None = None) -> int:
        """Make in-flight messages visible again now (visibility timeout 0); return how many."""
        released = 0
        for i in range(0, len(ids), MAX_BATCH):
            got = self._request(
                "POST",
                f"/v2/queues/{self._q(queue)}/messages/visibility",
                {"ids": list(ids[i : i + MAX_BATCH]), "visibility_timeout_s": 0},
                addr,
            )
            released += len(got["changed"])
        return released

    def delete(self, queue: str, ids: Sequence[int], addr: str | None = None) -> int:
        """Delete (acknowledge) messages; return how many existed."""
        deleted = 0
        for i in range(0, len(ids), MAX_BATCH):
            got = self._request(
                "POST",
                f"/v2/queues/{self._q(queue)}/messages/delete",
                {"ids": list(ids[i : i + MAX_BATCH])},
                addr,
            )
            deleted += int(got["deleted"])
        return deleted
