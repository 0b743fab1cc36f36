"""Endpoints, TLS, failover and retry timing, shared by both clients (no I/O but
reading a ``ca_file``).

A client is given one or more endpoints (nodes, or balancers in front of
them). It sends to the current one and moves to the next when a request
could not be sent there or the node refused to serve it (starting or
draining). Retries wait with exponential backoff and full jitter (AWS's
"Exponential Backoff and Jitter"): a crowd of clients that lost the same node
does not come back in step.
"""

from __future__ import annotations

import random
import ssl
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


DEFAULT_PORTS = {"http": 80, "https": 443}
"""The port an endpoint URL that names none connects to."""

_FORMS = "http(s)://host[:port] or host:port"


def split_endpoint(endpoint: str) -> tuple[str, str]:
    """``http[s]://host[:port]`` or ``host:port`` (http) → ``(scheme, addr)``.

    ``addr`` is the URL's ``host:port`` as written: ``[::1]:8081`` for an IPv6
    literal, only the host when the URL leaves the port to its scheme's default
    (:func:`host_port` says where to connect). Refused, with a ``ValueError``
    that names the endpoint: another scheme, credentials in the URL (a token goes
    in ``token=`` or ``DYNAQ_TOKEN``), a path, query or fragment (requests go to
    the root: ``/v1/...``, ``/v2/...``), a port that is not one.
    """
    if not endpoint:
        raise ValueError("an endpoint is needed (http://host:port)")
    if "://" not in endpoint:
        return "http", _bare_addr(endpoint)
    scheme_given, _, rest = endpoint.partition("://")
    netloc = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in netloc:  # the user info is never echoed: it may hold a password
        shown = f"{scheme_given}://…@{netloc.rpartition('@')[2]}"
        raise ValueError(
            f"endpoint {shown!r}: credentials in the URL are not supported; "
            "give a token instead (token=, --token or DYNAQ_TOKEN)"
        )
    try:
        parsed = urllib.parse.urlsplit(endpoint)
        parsed.port  # noqa: B018 - parsing it checks it (a URL may leave the default port)
    except ValueError as exc:
        raise ValueError(f"endpoint must be {_FORMS}, got {endpoint!r} ({exc})") from None
    if parsed.scheme not in DEFAULT_PORTS:
        raise ValueError(
            f"endpoint {endpoint!r}: scheme {parsed.scheme!r} is not supported (http or https)"
        )
    if not parsed.hostname:
        raise ValueError(f"endpoint must be {_FORMS}, got {endpoint!r} (no host)")
    if parsed.path not in ("", "/") or parsed.query or parsed.fragment:
        raise ValueError(
            f"endpoint {endpoint!r}: a path prefix (or query) is not supported; "
            "give the node's (or its proxy's) root URL, http(s)://host[:port]"
        )
    return parsed.scheme, parsed.netloc


def _bare_addr(endpoint: str) -> str:
    """A ``host:port`` endpoint (``[v6]:port`` for an IPv6 literal), checked."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isascii() or not port.isdecimal() or int(port) > 65_535:
        raise ValueError(f"endpoint must be {_FORMS}, got {endpoint!r}")
    if "@" in host or "/" in host:
        raise ValueError(f"endpoint must be {_FORMS}, got {endpoint!r}")
    bracketed = host.startswith("[") and host.endswith("]") and len(host) > 2
    if ":" in host and not bracketed:
        raise ValueError(
            f"endpoint must be {_FORMS}, got {endpoint!r} (an IPv6 address goes in brackets)"
        )
    return endpoint


def host_port(scheme: str, addr: str) -> tuple[str, int]:
    """Where to connect for ``addr`` (``host[:port]``, ``[v6][:port]``): the host
    without brackets, and the port, the scheme's default when none is written."""
    if addr.startswith("["):
        host, _, rest = addr[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = addr.partition(":")
    return host, int(port) if port else DEFAULT_PORTS[scheme]


def tls_context(scheme: str, ca_file: str | None) -> ssl.SSLContext | None:
    """The TLS context for ``https`` endpoints, verifying against ``ca_file`` (or the
    system's CAs); ``None`` for ``http``. A ``ca_file`` that cannot be read as
    certificates is a :class:`~dynaq.errors.ClientError` naming it."""
    if scheme != "https":
        if ca_file is not None:
            raise ValueError("ca_file is for https:// endpoints")
        return None
    try:
        return ssl.create_default_context(cafile=ca_file)
    except OSError as exc:  # missing, unreadable, a directory, not PEM (ssl.SSLError)
        raise ClientError(f"ca_file {ca_file!r}: {exc.strerror or exc}") from exc


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
