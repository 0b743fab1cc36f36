"""Bearer-token access control: which permission each route needs, checked in one middleware.

Every route is listed in :data:`ROUTES` with what it needs (see the README's
"Security"): receive, peek, snapshot and reads of settings need ``read``;
enqueue, delete, visibility, publish and batch updates need ``write``; creating,
changing and deleting queues and topics, subscriptions and batch removal need
``admin``. Listings and ring status need any valid token; ``/health`` needs
none (balancers probe it). A route missing from the table needs ``admin`` on
everything (fail closed), and a test fails until it is classified.

``/internal/*`` is not checked here: node-to-node requests carry a MAC instead
(:mod:`dynaq.api.internal`). With no policy (no tokens, on loopback or with
``auth.allow_anonymous``) this middleware lets everything through.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from dynaq.api.batches import ESTIMATED_BASE, EXACT_BASE
from dynaq.core.access import ADMIN, READ, WRITE, AccessPolicy, Token
from dynaq.core.batch_items import BATCH_ITEM_ATTRIBUTE
from dynaq.core.messages import NewMessage
from dynaq.core.peer_auth import INTERNAL_PREFIX
from dynaq.errors import Forbidden, Unauthorized

ACCESS = web.AppKey("access", AccessPolicy)
TOKEN = web.RequestKey("token", Token)
"""The token a request was admitted with (absent when no policy is configured)."""


_CHALLENGE = 'Bearer realm="dynaq"'
_INVALID = 'Bearer realm="dynaq", error="invalid_token"'


@dataclass(frozen=True, slots=True)
class Need:
    """One permission a route needs: on the ``kind`` resource named by the URL's
    ``{name}`` parameter, or by a literal name (a batch mode)."""

    perm: str
    kind: str
    name: str

    def resource(self, request: web.Request) -> str:
        if self.name.startswith("{"):
            return request.match_info.get(self.name.strip("{}"), "")
        return self.name


OPEN = None
"""No token needed."""
ANY_TOKEN: tuple[Need, ...] = ()
"""Any valid token."""
UNLISTED = (Need(ADMIN, "*", "*"),)
"""What a route missing from :data:`ROUTES` needs: admin on every kind and name."""


def _q(perm: str) -> tuple[Need, ...]:
    return (Need(perm, "queue", "{queue}"),)


def _t(perm: str) -> tuple[Need, ...]:
    return (Need(perm, "topic", "{topic}"),)


def _s(perm: str) -> tuple[Need, ...]:
    return (Need(perm, "stream", "{name}"),)


ROUTES: dict[tuple[str, str], tuple[Need, ...] | None] = {
    ("GET", "/health"): OPEN,
    ("POST", "/"): OPEN,  # SQS: AWS SigV4, checked by dynaq.api.aws
    ("GET", "/openapi.json"): ANY_TOKEN,
    ("GET", "/metrics"): ANY_TOKEN,
    # The console's static files (no data: the page asks the API with a token).
    ("GET", "/ui"): OPEN,
    ("GET", "/ui/"): OPEN,
    ("GET", "/ui/{asset}"): OPEN,
    ("GET", "/v1/status/servers"): ANY_TOKEN,
    ("GET", "/v1/status/partitionrange"): ANY_TOKEN,
    ("GET", "/v2/status/ring"): ANY_TOKEN,
    ("GET", "/v2/status/workers"): ANY_TOKEN,
    ("GET", "/v1/topics"): ANY_TOKEN,
    ("GET", "/v1/queues"): ANY_TOKEN,
    # topics
    ("PUT", "/v1/topics/{topic}"): _t(ADMIN),
    ("GET", "/v1/topics/{topic}"): _t(READ),
    ("DELETE", "/v1/topics/{topic}"): _t(ADMIN),
    # A subscription changes what both sides carry: admin on both.
    ("PUT", "/v1/topics/{topic}/queues/{queue}"): _t(ADMIN) + _q(ADMIN),
    ("DELETE", "/v1/topics/{topic}/queues/{queue}"): _t(ADMIN) + _q(ADMIN),
    ("PUT", "/v1/topics/{topic}/message"): _t(WRITE),
    ("POST", "/v2/topics/{topic}/messages"): _t(WRITE),
    # topic history: switching it on creates the topic's stream; a replay writes into
    # the queue its body names (checked by the handler: write on that queue)
    ("GET", "/v2/topics/{topic}"): _t(READ),
    ("PATCH", "/v2/topics/{topic}"): _t(ADMIN),
    ("POST", "/v2/topics/{topic}/replay"): _t(ADMIN),
    # queues: settings
    ("PUT", "/v1/queues/{queue}"): _q(ADMIN),
    ("GET", "/v1/queues/{queue}"): _q(READ),
    ("PATCH", "/v1/queues/{queue}"): _q(ADMIN),
    ("DELETE", "/v1/queues/{queue}"): _q(ADMIN),
    ("GET", "/v2/queues/{queue}"): _q(READ),
    # queues: messages
    ("PUT", "/v1/queues/{queue}/message"): _q(WRITE),
    ("GET", "/v1/queues/{queue}/messages/{batch_size_or_ids}"): _q(READ),
    ("GET", "/v1/queues/{queue}/message/{ids}"): _q(READ),
    ("DELETE", "/v1/queues/{queue}/message/{ids}"): _q(WRITE),
    ("DELETE", "/v1/queues/{queue}/messages/{batch_size_or_ids}"): _q(WRITE),
    ("POST", "/v2/queues/{queue}/messages"): _q(WRITE),
    ("POST", "/v2/queues/{queue}/messages/receive"): _q(READ),
    ("POST", "/v2/queues/{queue}/messages/delete"): _q(WRITE),
    ("POST", "/v2/queues/{queue}/messages/visibility"): _q(WRITE),
    # a transaction names its queues in its body: the handler requires write on each
    ("POST", "/v2/transactions"): ANY_TOKEN,
    # streams: declaring and deleting need admin, appending and the publisher lease write,
    # listening, the schema and the size read.
    ("GET", "/v2/streams"): ANY_TOKEN,
    ("PUT", "/v2/streams/{name}"): _s(ADMIN),
    ("DELETE", "/v2/streams/{name}"): _s(ADMIN),
    ("GET", "/v2/streams/{name}"): _s(READ),
    ("GET", "/v2/streams/{name}/schema"): _s(READ),
    ("POST", "/v2/streams/{name}/entries"): _s(WRITE),
    ("POST", "/v2/streams/{name}/publisher"): _s(WRITE),
    ("DELETE", "/v2/streams/{name}/publisher"): _s(WRITE),
    ("DELETE", "/v2/streams/{name}/subscriptions/{id}"): _s(READ),
    # processor status: workers report (write), operators read; dropping one is admin
    ("GET", "/v2/processors"): ANY_TOKEN,
    ("GET", "/v2/processors/{name}"): (Need(READ, "processor", "{name}"),),
    ("PUT", "/v2/processors/{name}"): (Need(WRITE, "processor", "{name}"),),
    ("DELETE", "/v2/processors/{name}"): (Need(ADMIN, "processor", "{name}"),),
    # dead letters and background tasks. A redrive writes into the queues its messages
    # came from (or to_queue): write on every queue besides admin on the one it empties.
    ("GET", "/v2/queues/{queue}/dead_letter_sources"): _q(READ),
    ("POST", "/v2/queues/{queue}/redrive"): (*_q(ADMIN), Need(WRITE, "queue", "*")),
    ("POST", "/v2/queues/{queue}/purge"): _q(ADMIN),
    ("GET", "/v2/tasks/{task}"): ANY_TOKEN,  # 128-bit random ids
    ("POST", "/v2/queues/{queue}/tasks/{task}/cancel"): _q(ADMIN),
    # bulk reads
    ("GET", "/v2/queues/{queue}/partitions"): _q(READ),
    ("GET", "/v2/queues/{queue}/snapshot"): _q(READ),
}


def _batch_routes() -> None:
    """Batches are named by their mode: ``batch/exact``, ``batch/estimated``."""
    for base, mode in ((EXACT_BASE, "exact"), (ESTIMATED_BASE, "estimated")):

        def b(perm: str, mode: str = mode) -> tuple[Need, ...]:
            return (Need(perm, "batch", mode),)

        ROUTES.update(
            {
                ("POST", base): b(WRITE),
                ("POST", base + "/"): b(WRITE),
                ("GET", base + "/{batch_id}"): b(READ),
                ("DELETE", base + "/{batch_id}"): b(ADMIN),
                ("DELETE", base + "/open"): b(ADMIN),
                ("DELETE", base + "/closed"): b(ADMIN),
            }
        )
    ROUTES.update(
        {
            ("POST", EXACT_BASE + "/close/{batch_id}"): (Need(WRITE, "batch", "exact"),),
            ("POST", EXACT_BASE + "/items"): (Need(WRITE, "batch", "exact"),),
            ("POST", EXACT_BASE + "/items/ack"): (Need(WRITE, "batch", "exact"),),
            ("POST", ESTIMATED_BASE + "/{batch_id}/close"): (Need(WRITE, "batch", "estimated"),),
            ("POST", ESTIMATED_BASE + "/{batch_id}/incr"): (Need(WRITE, "batch", "estimated"),),
            ("POST", ESTIMATED_BASE + "/decr"): (Need(WRITE, "batch", "estimated"),),
        }
    )


_batch_routes()


def needs_of(request: web.Request) -> tuple[Need, ...] | None:
    """What ``request``'s route needs (``None``: nothing). An unknown path or method
    needs any valid token, so strangers learn nothing about which routes exist."""
    resource = request.match_info.route.resource
    if resource is None:
        return ANY_TOKEN
    method = "GET" if request.method == "HEAD" else request.method
    return ROUTES.get((method, resource.canonical), UNLISTED)


def _presented(request: web.Request) -> str:
    header = request.headers.get("Authorization")
    if header is None:
        raise Unauthorized("missing bearer token: send Authorization: Bearer <token>", _CHALLENGE)
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise Unauthorized("Authorization must be Bearer <token>", _CHALLENGE)
    return value.strip()


def check_access(request: web.Request, policy: AccessPolicy) -> None:
    """Refuse the request (:class:`Unauthorized`, :class:`Forbidden`) unless its
    bearer token allows what its route needs; remember the token for
    :func:`require`. ``/internal/`` routes are the peer check's, not this one's."""
    if request.path.startswith(INTERNAL_PREFIX):
        return
    needs = needs_of(request)
    if needs is OPEN:
        return
    token = policy.find(_presented(request))
    if token is None:
        raise Unauthorized("unknown bearer token", _INVALID)
    for need in needs:
        name = need.resource(request)
        kind = None if need.kind == "*" else need.kind
        if not token.allows(need.perm, kind, name):
            raise Forbidden(f"token {token.name!r} may not {need.perm} {need.kind} {name!r}")
    request[TOKEN] = token


def require(request: web.Request, perm: str, kind: str, name: str) -> None:
    """A check a handler makes once it knows what the body asks for (the middleware
    saw only the route): :class:`Forbidden` unless the request's token allows it."""
    token = request.get(TOKEN)
    if token is not None and not token.allows(perm, kind, name):
        raise Forbidden(f"token {token.name!r} may not {perm} {kind} {name!r}")


def require_batch_tags(request: web.Request, messages: Iterable[NewMessage]) -> None:
    """Tagging a message with a batch item acks that item when the message is
    deleted, so it needs ``write`` on exact batches, as acking the item directly does."""
    if any(m.attributes and BATCH_ITEM_ATTRIBUTE in m.attributes for m in messages):
        require(request, WRITE, "batch", "exact")


def require_dead_letter_write(request: web.Request, changes: Mapping[str, Any]) -> None:
    """Naming a dead-letter queue makes the queue's failed messages land in it, so it
    needs ``write`` on that queue (the route's ``admin`` is on the queue being set)."""
    policy = changes.get("redrive_policy")
    if policy is not None:
        require(request, WRITE, "queue", policy.dead_letter_queue)
