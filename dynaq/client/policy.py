"""Endpoints, failover and retry timing, shared by both clients (no I/O).

A client is given one or more endpoints (nodes, or balancers in front of
them). It sends to the current one and moves to the next when a request
could not be sent there or the node refused to serve it (starting or
draining). Retries wait with exponential backoff and full jitter (AWS's
"Exponential Backoff and Jitter"): a crowd of clients that lost the same node
does not come back in step.
"""

from __future__ import annotations

import random
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

from dynaq.errors import ClientError, DynaqError, NotServing


@dataclass(frozen=True)
class RetryPolicy:
    """How hard a client tries: ``attempts`` sends of one request at most, waiting
    ``uniform(0, min(max_delay_s, base_delay_s * 2**n))`` before the n-th retry,
    and never retrying past ``deadline_s`` after the first send."""

    attempts: int = 5
    base_delay_s: float = 0.05
    max_delay_s: float = 2.0
    deadline_s: float = 30.0

    def delay_s(self, retry: int, rng: random.Random) -> float:
        return rng.uniform(0.0, min(self.max_delay_s, self.base_delay_s * (2**retry)))


NO_RETRIES = RetryPolicy(attempts=1)


def split_endpoint(endpoint: str) -> tuple[str, str]:
    """``http[s]://host:port`` or ``host:port`` (http) → ``(scheme, "host:port")``."""
    if not endpoint:
        raise ValueError("an endpoint is needed (http://host:port)")
    scheme = "http"
    if "://" in endpoint:
        parsed = urllib.parse.urlsplit(endpoint)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"endpoint must be http(s)://host:port, got {endpoint!r}")
        try:
            parsed.port  # noqa: B018 - parsing it checks it (a URL may leave the default port)
        except ValueError:
            raise ValueError(f"endpoint must be http(s)://host:port, got {endpoint!r}") from None
        return parsed.scheme, parsed.netloc
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isascii() or not port.isdecimal() or int(port) > 65_535:
        raise ValueError(f"endpoint must be http(s)://host:port or host:port, got {endpoint!r}")
    return scheme, endpoint


class Endpoints:
    """The endpoints in order, with the one in use; a failure moves to the next."""

    def __init__(self, endpoints: str | Sequence[str]) -> None:
        given = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        given = [e.strip() for g in given for e in g.split(",") if e.strip()]
        if not given:
            raise ValueError("at least one endpoint is needed")
        split = [split_endpoint(e) for e in given]
        schemes = {s for s, _ in split}
        if len(schemes) > 1:
            raise ValueError("endpoints must all be http:// or all https://")
        self.scheme = split[0][0]
        self.addrs = [a for _, a in split]
        self._current = 0

    @property
    def current(self) -> str:
        return self.addrs[self._current]

    def failed(self, addr: str) -> None:
        """``addr`` did not serve: use the next one (unless another failure moved on already)."""
        if self.addrs[self._current] == addr:
            self._current = (self._current + 1) % len(self.addrs)

    def __repr__(self) -> str:
        return ", ".join(f"{self.scheme}://{a}" for a in self.addrs)


def moves_on(exc: DynaqError) -> bool:
    """Whether this failure says "try another endpoint" (not just "try later")."""
    return isinstance(exc, NotServing) or (isinstance(exc, ClientError) and exc.retriable)
