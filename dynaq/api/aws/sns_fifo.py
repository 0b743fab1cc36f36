"""SNS topic kinds: standard topics, and FIFO topics (names ending in ``.fifo``).

A FIFO topic is a dynaq topic whose name ends in ``.fifo``: SNS makes the
suffix and the ``FifoTopic`` attribute go together, and so does CreateTopic
here. What differs is what a publish must carry and where copies may go:

* a publish to a FIFO topic needs a ``MessageGroupId``; without a
  ``MessageDeduplicationId`` its id is the SHA-256 of the body, as SNS derives it
  with ``ContentBasedDeduplication`` (dynaq's FIFO topics always do);
* a publish to a standard topic may not carry a ``MessageDeduplicationId``
  (SNS refuses it; taken, it would silently drop later messages in every
  subscribed queue);
* a FIFO queue takes subscriptions from FIFO topics only (a standard topic's
  messages have no group, which a FIFO queue needs).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from dynaq.api.aws.query_wire import QueryError, invalid

FIFO_SUFFIX = ".fifo"
_STANDARD_NAME = re.compile(r"[A-Za-z0-9_-]{1,256}")
_FIFO_NAME = re.compile(r"[A-Za-z0-9_-]{1,251}\.fifo")
_KNOWN_ATTRIBUTES = frozenset(
    {
        "DisplayName",
        "Policy",
        "DeliveryPolicy",
        "KmsMasterKeyId",
        "SignatureVersion",
        "TracingConfig",
        "DataProtectionPolicy",
        "ArchivePolicy",
        "FifoTopic",
        "ContentBasedDeduplication",
        "FifoThroughputScope",
    }
)
"""CreateTopic's attributes (SNS API reference). Only FifoTopic changes what dynaq
does; the others describe delivery to other protocols, signing and encryption,
which dynaq's queue-only topics do not have, and are taken and not kept."""


def is_fifo(topic: str) -> bool:
    return topic.endswith(FIFO_SUFFIX)


def check_new_topic(name: str, attrs: Mapping[str, str]) -> None:
    """Refuse a CreateTopic SNS would refuse: a name of the wrong kind, unknown attributes."""
    for key in attrs:
        if key not in _KNOWN_ATTRIBUTES:
            raise invalid(f"Attributes Reason: Unknown attribute {key}")
    fifo = attrs.get("FifoTopic", "false").lower() == "true"
    if fifo:
        if not _FIFO_NAME.fullmatch(name):
            raise invalid(
                "Topic Name: Fifo Topic names must end with .fifo and must be made up of only "
                "uppercase and lowercase ASCII letters, numbers, underscores, and hyphens, "
                "and must be between 1 and 256 characters long."
            )
    elif not _STANDARD_NAME.fullmatch(name):  # dynaq's own APIs also take dots
        raise invalid(
            "Topic Name: must be made up of only uppercase and lowercase ASCII letters, "
            "numbers, underscores, and hyphens, and must be between 1 and 256 characters long"
            + (" (a name ending in .fifo needs the FifoTopic attribute)" if is_fifo(name) else "")
        )
    if not fifo and "ContentBasedDeduplication" in attrs:
        raise invalid("Attributes Reason: ContentBasedDeduplication is only valid for FIFO topics")


def message_tags(
    topic: str, body: str, group: str | None, dedup: str | None
) -> tuple[str | None, str | None]:
    """The group and dedup id a publish to ``topic`` stores (see the module docstring)."""
    if is_fifo(topic):
        if group is None:
            raise invalid("The MessageGroupId parameter is required for FIFO topics")
        if dedup is None:
            dedup = hashlib.sha256(body.encode()).hexdigest()
        return group, dedup
    if dedup is not None:
        raise invalid(
            "The request includes MessageDeduplicationId parameter that is not valid for "
            "this topic type"
        )
    return group, dedup


def check_subscription(topic: str, queue: str, queue_is_fifo: bool) -> None:
    if queue_is_fifo and not is_fifo(topic):
        raise QueryError(
            "InvalidParameter",
            f"Invalid parameter: Endpoint Reason: FIFO SQS Queues can not be subscribed to "
            f"standard SNS topics ({queue} to {topic})",
        )


def fifo_attributes(topic: str) -> dict[str, str]:
    """GetTopicAttributes' FIFO entries for ``topic`` (none for a standard topic)."""
    if not is_fifo(topic):
        return {}
    return {"FifoTopic": "true", "ContentBasedDeduplication": "true"}
