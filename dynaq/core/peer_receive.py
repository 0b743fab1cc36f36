"""Wire format of the node-to-node receive routes a ring-wide long poll uses.

``RECEIVE_PATH`` serves a receive from the answering node's own slice (no
waiting); ``WATCH_PATH`` waits until that node may have something visible for
a queue and serves nothing. Both are msgpack, signed like every ``/internal/``
route.
"""

from __future__ import annotations

from typing import Any

from dynaq.core.messages import DeadLetterOrigin, Message
from dynaq.errors import InvalidInput

RECEIVE_PATH = "/internal/v1/receive"
"""msgpack ``{"queue": name, "max_messages": n, "visibility_timeout_s": s}`` →
``{"messages": [message, ...]}`` (see :func:`message_to_wire`)."""
WATCH_PATH = "/internal/v1/watch"
"""msgpack ``{"queue": name, "wait_s": s}`` → ``{"ready": bool}``."""


def message_to_wire(m: Message) -> list[Any]:
    """``[id, body, enqueued_ms, attributes, receive_count, group, delivery, origin,
    first_received_ms]`` (an older peer sends the first eight: 0, unknown)."""
    o = m.origin
    origin = (
        None
        if o is None
        else [o.queue, o.message_id, o.receive_count, o.enqueued_ms, o.dead_lettered_ms]
    )
    return [
        m.id, m.body, m.enqueued_ms, m.attributes, m.receive_count, m.group, m.delivery, origin,
        m.first_received_ms,
    ]  # fmt: skip


def message_from_wire(raw: Any) -> Message:
    """The inverse of :func:`message_to_wire`; :class:`InvalidInput` if malformed."""
    try:
        mid, body, enqueued, attributes, count, group, delivery, origin, *later = raw
        o = None if origin is None else DeadLetterOrigin(
            str(origin[0]), int(origin[1]), int(origin[2]), int(origin[3]), int(origin[4])
        )  # fmt: skip
        return Message(
            int(mid),
            bytes(body),
            int(enqueued),
            None if attributes is None else {str(k): str(v) for k, v in attributes.items()},
            int(count),
            None if group is None else str(group),
            o,
            int(delivery),
            int(later[0]) if later else 0,
        )
    except (ValueError, TypeError, LookupError, AttributeError) as exc:
        raise InvalidInput(f"malformed forwarded message: {exc}") from None
