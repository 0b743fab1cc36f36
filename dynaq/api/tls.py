"""TLS for the HTTP API: the server's context, and the one nodes verify each other with.

A node with ``http.tls_cert`` and ``http.tls_key`` serves HTTPS only and
advertises the ``https`` scheme to its peers (gossip metadata), so hints and
the handover reach it over TLS. Peers' certificates are verified against
``http.tls_ca`` (or the system's CAs), hostname included: each node's
certificate must name the address it advertises (``gossip.advertise_http``).
"""

from __future__ import annotations

import ssl

from dynaq.config import HttpConfig
from dynaq.errors import InvalidInput


def server_ssl_context(http: HttpConfig) -> ssl.SSLContext | None:
    """The listener's TLS context, or ``None`` for plain HTTP (no cert configured)."""
    if not http.tls_cert:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(http.tls_cert, http.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidInput(
            f"http.tls_cert / http.tls_key cannot be loaded ({http.tls_cert}, {http.tls_key}): "
            f"{exc}"
        ) from None
    return ctx


def peer_ssl_context(http: HttpConfig) -> ssl.SSLContext:
    """What this node trusts when it calls a peer over HTTPS."""
    try:
        ctx = ssl.create_default_context(cafile=http.tls_ca or None)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidInput(f"http.tls_ca cannot be loaded ({http.tls_ca}): {exc}") from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx
